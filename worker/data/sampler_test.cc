#include "worker/data/sampler.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(SamplerTest, EpochOrderIsASeededPermutation) {
  std::vector<int64_t> a, b, c;
  EpochOrder(1, 0, 1000, &a);
  EpochOrder(1, 0, 1000, &b);
  EpochOrder(1, 1, 1000, &c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(a, sorted);
}

// N workers x batch b cover exactly the samples of 1 worker x N*b, step by
// step.
TEST(SamplerTest, SharesTileEachGlobalBatch) {
  const int64_t n = 1003;
  for (int world : {1, 2, 3, 4}) {
    const int b = 16;
    const int64_t steps = StepsPerEpoch(n, world, b);
    EXPECT_EQ(steps, StepsPerEpoch(n, 1, world * b));
    std::set<int64_t> seen;
    for (int64_t s = 0; s < steps; ++s) {
      const Share whole = WorkerShare(n, s, 0, 1, world * b);
      int64_t next = whole.begin, total = 0;
      for (int r = 0; r < world; ++r) {
        const Share part = WorkerShare(n, s, r, world, b);
        if (part.count > 0) {
          EXPECT_EQ(part.begin, next);
          next += part.count;
        }
        total += part.count;
        for (int64_t i = 0; i < part.count; ++i) seen.insert(part.begin + i);
      }
      EXPECT_EQ(total, whole.count);
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << world;
  }
  // The last global batch is short: later ranks may get nothing.
  EXPECT_EQ(WorkerShare(1003, 31, 1, 2, 16).count, 0);
  EXPECT_EQ(WorkerShare(1003, 31, 0, 2, 16).count, 11);
}

TEST(SamplerTest, GatherStandardises) {
  IdxImages images;
  images.count = 2;
  images.rows = 1;
  images.cols = 2;
  images.pixels = {0, 255, 255, 0};
  const std::vector<int32_t> labels = {3, 7};
  BatchGatherer g(images);
  const int64_t order[2] = {1, 0};
  float x[4];
  int32_t y[2];
  g.Gather(images, labels, order, 2, x, y);
  EXPECT_FLOAT_EQ(x[0], 1.0f);  // mean 0.5, std 0.5
  EXPECT_FLOAT_EQ(x[1], -1.0f);
  EXPECT_EQ(y[0], 7);
  EXPECT_EQ(y[1], 3);
  g.GatherRange(images, labels, 1, 1, x, y);
  EXPECT_FLOAT_EQ(x[0], 1.0f);
  EXPECT_EQ(y[0], 7);
}

}  // namespace
}  // namespace fulcrum
