#include "common/embedding/placement.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// Rows in checkpoints were placed by this function: it may never change.
TEST(PlacementTest, IsPinned) {
  EXPECT_EQ(Mix64(0), 0u);
  EXPECT_EQ(Mix64(1), 0x5692161d100b05e5ULL);
  struct Pin {
    uint64_t id;
    int of2, of7, of256;
  } pins[] = {{0, 0, 1, 53},          {1, 0, 2, 73},
              {2, 0, 0, 26},          {1ULL << 63, 1, 4, 167},
              {~0ULL, 1, 6, 254},     {123456789, 1, 4, 154}};
  for (const Pin& p : pins) {
    EXPECT_EQ(ShardOfRow(p.id, 2), p.of2) << p.id;
    EXPECT_EQ(ShardOfRow(p.id, 7), p.of7) << p.id;
    EXPECT_EQ(ShardOfRow(p.id, 256), p.of256) << p.id;
  }
  EXPECT_EQ(ShardOfRow(12345, 1), 0);
}

// Sequential ids, ids differing only in high bits, and random ids: each
// shard's share within 2% of 1/S (chi-square would be stricter; this is
// the property users see: even memory).
TEST(PlacementTest, SpreadsEvenly) {
  constexpr int kRows = 400000;
  for (int shards : {2, 3, 8}) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      std::vector<int> count(shards, 0);
      uint64_t x = 88172645463325252ULL;
      for (int i = 0; i < kRows; ++i) {
        uint64_t id = pattern == 0   ? static_cast<uint64_t>(i)
                      : pattern == 1 ? static_cast<uint64_t>(i) << 40
                                     : (x ^= x << 13, x ^= x >> 7, x ^= x << 17);
        const int s = ShardOfRow(id, shards);
        ASSERT_GE(s, 0);
        ASSERT_LT(s, shards);
        ++count[s];
      }
      for (int s = 0; s < shards; ++s) {
        EXPECT_NEAR(static_cast<double>(count[s]) / kRows, 1.0 / shards, 0.02)
            << "shards " << shards << " pattern " << pattern << " shard " << s;
      }
    }
  }
}

}  // namespace
}  // namespace fulcrum
