#include "worker/model/binary_metrics.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(BinaryMetricsTest, AucCountsOrderedPairsWithTiesAsHalf) {
  // Pairs (pos, neg): positives 0.9, 0.4; negatives 0.5, 0.1, 0.4.
  // 0.9 beats all 3; 0.4 beats 0.1, ties 0.4, loses to 0.5: 1.5. 4.5 / 6.
  const std::vector<float> s = {0.9f, 0.5f, 0.1f, 0.4f, 0.4f};
  const std::vector<float> y = {1, 0, 0, 1, 0};
  EXPECT_DOUBLE_EQ(Auc(s, y), 4.5 / 6);
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.2f}, {0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.2f}, {1, 0}), 0.0);
  EXPECT_DOUBLE_EQ(Auc({0.3f, 0.3f}, {1, 1}), 0.5);  // one class only
}

TEST(BinaryMetricsTest, LogLossIsStable) {
  EXPECT_NEAR(LogLoss({0.0f}, {1}), std::log(2.0), 1e-12);
  EXPECT_NEAR(LogLoss({100.0f, -100.0f}, {1, 0}), 0.0, 1e-12);
  EXPECT_NEAR(LogLoss({-100.0f}, {1}), 100.0, 1e-9);
}

}  // namespace
}  // namespace fulcrum
