#include "common/dataplane/arrivals.h"

#include <thread>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

ParameterLayout TwoPartitions() {
  // 64 -> 8 MLP (520 floats) in partitions of at most 1 KiB: several.
  return *ParameterLayout::ForMlp({64, 8}, 1, 1024);
}

TEST(ArrivalsTest, APartitionCountsOnceWhole) {
  const ParameterLayout layout = TwoPartitions();
  ASSERT_GE(layout.partitions().size(), 2u);
  Arrivals a(&layout);
  for (const Partition& p : layout.partitions()) {
    a.Received(p.id, p.size - 1, 3, false);
    a.Received(p.id, 1, 3, p.id == 1);
  }
  EXPECT_EQ(*a.WaitForAll(absl::Now()), 3);
  std::vector<int32_t> seen;
  bool stop = false;
  ASSERT_TRUE(
      a.WaitForClock(3, absl::Now(), &stop, [&](int32_t id) {
         seen.push_back(id);
       }).ok());
  EXPECT_EQ(seen.size(), layout.partitions().size());
  EXPECT_TRUE(stop) << "one partition carried the stop";
  // Half of a later version is not an arrival; a restart forgets it.
  a.Received(0, 1, 4, false);
  a.Restart({0});
  EXPECT_EQ(a.WaitForClock(4, absl::Now() + absl::Milliseconds(10), &stop,
                           [](int32_t) {})
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(ArrivalsTest, DisagreeingShardsFailuresAndCancelEndWaits) {
  const ParameterLayout layout = TwoPartitions();
  Arrivals a(&layout);
  for (const Partition& p : layout.partitions())
    a.Received(p.id, p.size, p.id == 0 ? 1 : 2, false);
  EXPECT_EQ(a.WaitForAll(absl::Now()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  Arrivals b(&layout);
  std::thread failer([&] { b.Fail(absl::AbortedError("generation ended")); });
  bool stop;
  EXPECT_EQ(b.WaitForClock(1, absl::InfiniteFuture(), &stop, [](int32_t) {})
                .code(),
            absl::StatusCode::kAborted);
  failer.join();
  b.Fail(absl::InternalError("later"));
  EXPECT_EQ(b.error().code(), absl::StatusCode::kAborted) << "the first stays";
  Arrivals c(&layout);
  c.Cancel();
  EXPECT_EQ(c.WaitForAll(absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace fulcrum
