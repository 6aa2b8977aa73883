#include "worker/data/criteo.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = std::string(::testing::TempDir()) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Line(const std::string& label, const std::string& first_int,
                 const std::string& first_cat) {
  std::string l = label + "\t" + first_int;
  for (int i = 1; i < 13; ++i) l += "\t" + std::to_string(i);
  l += "\t" + first_cat;
  for (int i = 1; i < 26; ++i) l += "\tff";
  return l + "\n";
}

TEST(CriteoTest, ReadsLikeTheTorchExample) {
  const std::string path =
      Write("a.tsv", Line("1", "5", "0a0b0c0d") + Line("0", "", "") +
                         Line("0", "-3", "ffffffff"));
  auto logs = LoadCriteo(path, 0);
  ASSERT_TRUE(logs.ok()) << logs.status();
  ASSERT_EQ(logs->count, 3);
  EXPECT_EQ(logs->labels, (std::vector<float>{1, 0, 0}));
  EXPECT_FLOAT_EQ(logs->dense[0], std::log1p(5.0f));
  EXPECT_FLOAT_EQ(logs->dense[1], std::log1p(1.0f));
  EXPECT_EQ(logs->dense[13], 0.0f);      // missing
  EXPECT_EQ(logs->dense[26], 0.0f);      // negative: max(x, 0)
  EXPECT_EQ(logs->id(0, 0), (uint64_t{1} << 32) | 0x0a0b0c0d);
  EXPECT_EQ(logs->id(0, 1), (uint64_t{2} << 32) | 0xff);
  EXPECT_EQ(logs->id(0, 25), (uint64_t{26} << 32) | 0xff);
  EXPECT_EQ(logs->id(1, 0), uint64_t{1} << 32);  // missing: the field's id
  EXPECT_EQ(logs->id(2, 0), (uint64_t{1} << 32) | 0xffffffff);
  auto first = LoadCriteo(path, 2);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->count, 2);
  EXPECT_EQ(first->cats.size(), 52u);
}

TEST(CriteoTest, BadLinesAreNamedByLineAndColumn) {
  const std::string good = Line("1", "5", "0a");
  struct Case {
    std::string text, want;
  } cases[] = {
      {good + Line("2", "5", "0a"), ":2: column 1"},
      {good + Line("1", "x5", "0a"), ":2: column 2 is not a number"},
      {good + Line("1", "5", "0g"), ":2: column 15 is not a category"},
      {good + Line("1", "5", "123456789"), ":2: column 15"},
      {good + "1\t2\t3\n", ":2: 3 columns, want 40"},
      {good + Line("1", "5", "0a").substr(0, 10) + "\t\t" + Line("0", "", ""),
       ":2:"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string path = Write("bad" + std::to_string(i++) + ".tsv", c.text);
    auto logs = LoadCriteo(path, 0);
    EXPECT_EQ(logs.status().code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_NE(logs.status().message().find(c.want), std::string::npos)
        << logs.status();
  }
  EXPECT_EQ(LoadCriteo("/nonexistent/x.tsv", 0).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fulcrum
