// Fuzzing the job-spec parser and validator: random and mutated valid specs,
// bounded in count and time. Each input either parses and validates, or
// fails with a status that has a message of bounded size; nothing crashes
// or throws.
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/config/job_spec.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Error messages quote at most 64 characters of the input.
constexpr size_t kMaxMessage = 1024;

TEST(JobSpecFuzzTest, MutatedSpecsParseOrFailWithABoundedMessage) {
  std::vector<std::string> seeds = {
      ReadFile("examples/fashion_mnist_mlp.yaml"),  // from the runfiles
      "name: a\nmodel: {type: external}\noptimizer: {type: adam, lr: 0.001, "
      "eps: 1e-8}\nconsistency: {mode: ssp, staleness: 2}\nworkers: {min: "
      "1, max: 4}\n",
      "{\"name\": \"j\", \"model\": {\"type\": \"mlp\", \"layers\": [4, 2]}, "
      "\"dataset\": {\"dir\": \"/d\"}, \"optimizer\": {\"lr\": 0.1}}",
  };
  ASSERT_FALSE(seeds[0].empty()) << "the example spec is a data dependency";
  const std::vector<std::string> tokens = {
      "{", "}", "[", "]", ":", ",", "- ", "\n", "  ", "nan", ".inf", "-.inf",
      "-1", "1e400", "99999999999999999999", "''", "\"", "&a ", "*a",
      "!!binary ", "~", "null", "true", "optimizer", "model", "layers",
      "type", "external", "tensors", "dataset", "dir", "../..", "\t", "%",
      "@", "\xff\xfe", std::string(5000, 'x'), "[[[[[[[[[[", "{a: {b: {c: ",
      "on_nonfinite", "checkpoint", "every_steps", "schedule", "shape"};
  std::mt19937 rng(20261203);
  auto below = [&](size_t n) {
    return n == 0 ? size_t{0}
                  : std::uniform_int_distribution<size_t>(0, n - 1)(rng);
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int accepted = 0, rejected = 0, runs = 0;
  for (; runs < 4000 && std::chrono::steady_clock::now() < deadline; ++runs) {
    std::string text = seeds[below(seeds.size())];
    const int mutations = 1 + static_cast<int>(below(4));
    for (int m = 0; m < mutations; ++m) {
      const size_t at = below(text.size() + 1);
      switch (below(5)) {
        case 0:  // flip a byte
          if (!text.empty()) text[below(text.size())] ^= 1 << below(8);
          break;
        case 1:  // delete a range
          text.erase(at, below(16));
          break;
        case 2:  // insert a token
          text.insert(at, tokens[below(tokens.size())]);
          break;
        case 3:  // truncate
          text.resize(at);
          break;
        default:  // a random byte
          text.insert(at, 1, static_cast<char>(below(256)));
      }
    }
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text);
    if (!spec.ok()) {
      ++rejected;
      EXPECT_FALSE(spec.status().message().empty()) << text;
      EXPECT_LE(spec.status().message().size(), kMaxMessage) << text;
      continue;
    }
    ApplyDefaults(&*spec);
    const absl::Status valid = ValidateJobSpec(*spec);
    if (valid.ok()) {
      ++accepted;
    } else {
      ++rejected;
      EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument) << valid;
      EXPECT_FALSE(valid.message().empty());
      EXPECT_LE(valid.message().size(), kMaxMessage) << valid;
    }
  }
  // Both ways were taken, many times.
  EXPECT_GT(runs, 500);
  EXPECT_GT(accepted, 10);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace fulcrum
