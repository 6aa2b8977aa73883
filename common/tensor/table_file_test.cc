#include "common/tensor/table_file.h"

#include <fstream>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(TableFileTest, RoundTripsAndDetectsCorruption) {
  const std::string path = ::testing::TempDir() + "/t.tables";
  std::vector<ExportedTable> tables(2);
  tables[0] = {"user", 2, {7, 1ull << 40}, {1, 2, 3, 4}};
  tables[1] = {"empty", 8, {}, {}};
  ASSERT_TRUE(WriteTableFile(path, tables).ok());
  auto back = ReadTableFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].name, "user");
  EXPECT_EQ((*back)[0].dim, 2);
  EXPECT_EQ((*back)[0].ids, tables[0].ids);
  EXPECT_EQ((*back)[0].values, tables[0].values);
  EXPECT_EQ((*back)[1].name, "empty");
  EXPECT_TRUE((*back)[1].ids.empty());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x5a');
  }
  EXPECT_EQ(ReadTableFile(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadTableFile(path + ".none").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fulcrum
