#include "common/net/grpc_options.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, GrowsAndIsBounded) {
  // With the largest random value the wait is exactly the bound.
  EXPECT_EQ(Backoff(0, milliseconds(50), milliseconds(1000), 50),
            milliseconds(50));
  EXPECT_EQ(Backoff(2, milliseconds(50), milliseconds(1000), 200),
            milliseconds(200));
  EXPECT_EQ(Backoff(30, milliseconds(50), milliseconds(1000), 1000),
            milliseconds(1000));
  for (uint64_t r = 0; r < 5000; r += 37) {
    EXPECT_LE(Backoff(8, milliseconds(50), milliseconds(1000), r),
              milliseconds(1000));
  }
  EXPECT_EQ(Backoff(1, milliseconds(50), milliseconds(1000), 0),
            milliseconds(0));
}

}  // namespace
}  // namespace fulcrum
