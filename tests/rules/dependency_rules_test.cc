// The dependency rules the build enforces (docs/architecture.md). `bazel
// query` output of each core's transitive dependencies (genquery, at build
// time) must name no gRPC target, and the cores' own sources must include
// no gRPC header: a core is plain C++ a test runs without a network.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string Runfiles() {
  const char* dir = std::getenv("TEST_SRCDIR");
  return std::string(dir != nullptr ? dir : ".") + "/fulcrum/";
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The labels `bazel query deps(target)` printed for genquery `name`.
std::vector<std::string> Deps(const std::string& name) {
  const std::string text = Read(Runfiles() + "tests/rules/" + name + "_deps");
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// Targets that mean gRPC: the library, the generated service code, and our
// gRPC helpers.
bool IsGrpc(const std::string& label) {
  return label == "@system//:grpc" || absl::EndsWith(label, "_grpc") ||
         label == "//common/net:grpc_options" ||
         label == "//common/net:transport" ||
         label == "//common/status:grpc_status";
}

class CoreTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CoreTest, DependsOnNoGrpcTarget) {
  const std::vector<std::string> deps = Deps(GetParam());
  ASSERT_GT(deps.size(), 1u) << "the query output is missing";
  for (const std::string& label : deps)
    EXPECT_FALSE(IsGrpc(label)) << GetParam() << " depends on " << label;
}

INSTANTIATE_TEST_SUITE_P(
    Cores, CoreTest,
    ::testing::Values("agent_state", "checkpoint", "clocks",
                      "coordinator_core", "dataplane", "embedding",
                      "embedding_rows", "export", "journal",
                      "layout", "optimizer", "shard_core", "trainer",
                      "worker_session"));

TEST(DependencyRulesTest, CoreSourcesIncludeNoGrpcHeader) {
  int files = 0;
  for (const char* package :
       {"server/ps", "server/ps/embedding", "server/coordinator", "worker",
        "client", "common/dataplane", "common/embedding", "common/tensor"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(Runfiles() + package)) {
      const std::string path = entry.path().string();
      if (!absl::EndsWith(path, ".h") && !absl::EndsWith(path, ".cc")) continue;
      ++files;
      for (absl::string_view line : absl::StrSplit(Read(path), '\n')) {
        if (!absl::StartsWith(line, "#include")) continue;
        EXPECT_FALSE(absl::StrContains(line, "grpc"))
            << package << "/" << entry.path().filename().string() << ": "
            << line;
      }
    }
  }
  EXPECT_GT(files, 40) << "the core files are missing from the runfiles";
}

TEST(DependencyRulesTest, TheCliReachesShardsOnlyThroughTheCoordinator) {
  for (const std::string& label : Deps("fulcrumctl")) {
    EXPECT_NE(label, "//proto:parameter_server_grpc");
    EXPECT_FALSE(absl::StartsWith(label, "//server/")) << label;
    EXPECT_FALSE(absl::StartsWith(label, "//worker/")) << label;
  }
}

TEST(DependencyRulesTest, WorkersReachOtherRolesOnlyThroughProto) {
  bool proto = false;
  for (const std::string& label : Deps("fulcrum_worker")) {
    EXPECT_FALSE(absl::StartsWith(label, "//server/")) << label;
    EXPECT_FALSE(absl::StartsWith(label, "//client")) << label;
    proto = proto || label == "//proto:parameter_server_grpc";
  }
  EXPECT_TRUE(proto) << "the worker speaks the data plane";
}

}  // namespace
}  // namespace fulcrum
