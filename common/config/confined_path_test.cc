#include "common/config/confined_path.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <sys/stat.h>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(ConfinedPathTest, RelativeUnderTheRootAbsoluteMustBeUnderIt) {
  EXPECT_EQ(*ConfinedPath("/var/lib/f", "job/ck", "checkpoint.dir"),
            "/var/lib/f/job/ck");
  EXPECT_EQ(*ConfinedPath("/var/lib/f/", "./a//b/", "checkpoint.dir"),
            "/var/lib/f/a/b");
  EXPECT_EQ(*ConfinedPath("/var/lib/f", "", "checkpoint.dir"), "/var/lib/f");
  EXPECT_EQ(*ConfinedPath("/var/lib/f", "/var/lib/f/x", "checkpoint.dir"),
            "/var/lib/f/x");
  EXPECT_EQ(*ConfinedPath("/", "/etc", "dataset.dir"), "/etc");
}

TEST(ConfinedPathTest, EscapesAreInvalidArgumentsNamingTheField) {
  struct Case {
    std::string path, message;
  } cases[] = {
      {"../../etc", "checkpoint.dir must not contain '..', got '../../etc'"},
      {"a/../../b", "must not contain '..'"},
      {"/etc", "checkpoint.dir '/etc' is outside /var/lib/f"},
      {"/var/lib/fx", "is outside /var/lib/f"},  // a sibling, not a child
      {std::string(5000, 'a') + "/..", "(5003 bytes)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> r =
        ConfinedPath("/var/lib/f", c.path, "checkpoint.dir");
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << c.path.substr(0, 40);
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << r.status();
    EXPECT_LT(r.status().message().size(), 200u);
  }
  EXPECT_EQ(ConfinedPath("relative", "x", "dataset.dir").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConfinedPath("/r", std::string("a\0b", 3), "dataset.dir")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConfinedPathTest, ASymbolicLinkOutOfTheRootIsRefused) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string base = std::string(tmp != nullptr ? tmp : "/tmp") + "/cp";
  const std::string root = base + "/root";
  mkdir(base.c_str(), 0755);
  mkdir(root.c_str(), 0755);
  mkdir((root + "/inside").c_str(), 0755);
  unlink((root + "/out").c_str());
  ASSERT_EQ(symlink("/etc", (root + "/out").c_str()), 0);
  EXPECT_TRUE(ResolveConfined(root, "inside/new/dir", "checkpoint.dir").ok());
  EXPECT_TRUE(ResolveConfined(root, "not/yet", "checkpoint.dir").ok());
  absl::StatusOr<std::string> r =
      ResolveConfined(root, "out/cron.d", "checkpoint.dir");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("leads out of"), std::string::npos)
      << r.status();
  r = ResolveConfined(root, "out", "checkpoint.dir");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fulcrum
