#include "common/embedding/sparse_batch.h"

#include <vector>

#include "common/embedding/placement.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(SparseBatchTest, SumsDuplicatesInFirstOccurrenceOrder) {
  const std::vector<uint64_t> ids = {7, 3, 7, 9, 3, 7};
  std::vector<float> g;
  for (int i = 0; i < 6; ++i) {
    g.push_back(i);
    g.push_back(10 * i);
  }
  SparseBatch b = Coalesce(ids, g, 2);
  EXPECT_EQ(b.dim, 2);
  EXPECT_EQ(b.ids, (std::vector<uint64_t>{7, 3, 9}));
  EXPECT_EQ(b.counts, (std::vector<uint32_t>{3, 2, 1}));
  EXPECT_EQ(b.gradients, (std::vector<float>{0 + 2 + 5, 0 + 20 + 50,  // 7
                                             1 + 4, 10 + 40,          // 3
                                             3, 30}));                // 9
  SparseBatch empty = Coalesce({}, {}, 4);
  EXPECT_TRUE(empty.ids.empty());
  EXPECT_TRUE(empty.gradients.empty());
}

TEST(SparseBatchTest, SplitsByPlacement) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 1000; ++i) ids.push_back(i * 7919);
  auto parts = SplitByShard(ids, 3);
  ASSERT_EQ(parts.size(), 3u);
  size_t total = 0;
  for (int s = 0; s < 3; ++s) {
    uint32_t last = 0;
    for (size_t k = 0; k < parts[s].size(); ++k) {
      const uint32_t pos = parts[s][k];
      EXPECT_EQ(ShardOfRow(ids[pos], 3), s);
      if (k > 0) EXPECT_GT(pos, last);  // in order
      last = pos;
    }
    total += parts[s].size();
  }
  EXPECT_EQ(total, ids.size());
}

}  // namespace
}  // namespace fulcrum
