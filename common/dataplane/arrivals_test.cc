#include "common/dataplane/arrivals.h"

#include <atomic>
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

TEST(ArrivalsTest, APumpingWaitReadsItselfAndSleepsOnlyWhenItHasNothing) {
  const ParameterLayout layout = TwoPartitions();
  const std::vector<Partition>& parts = layout.partitions();
  Arrivals a(&layout);
  // The pump delivers one partition per call on the waiting thread.
  std::vector<int32_t> pumped_clocks;
  size_t next = 0;
  const std::thread::id waiter = std::this_thread::get_id();
  bool other_thread = false;
  std::vector<int32_t> seen;
  bool stop = false;
  ASSERT_TRUE(a.WaitForClock(
                   2, absl::Now() + absl::Seconds(10), &stop,
                   [&](int32_t id) { seen.push_back(id); },
                   [&](int64_t clock, absl::Time) {
                     other_thread |= std::this_thread::get_id() != waiter;
                     pumped_clocks.push_back(static_cast<int32_t>(clock));
                     if (next == parts.size()) return false;
                     EXPECT_TRUE(a.Outstanding({parts[next].id}, clock));
                     a.Received(parts[next].id, parts[next].size, 2, false);
                     EXPECT_FALSE(a.Outstanding({parts[next].id}, clock));
                     ++next;
                     return true;
                   })
                  .ok());
  EXPECT_FALSE(other_thread);
  EXPECT_EQ(seen.size(), parts.size());
  EXPECT_EQ(next, parts.size()) << "every partition came from the pump";
  for (int32_t c : pumped_clocks) EXPECT_EQ(c, 2);

  // A pump with nothing to read: the wait sleeps until a Poke, then asks
  // it again (the second call finds what the poker made readable).
  Arrivals b(&layout);
  std::atomic<bool> readable{false};
  int calls = 0;
  std::thread poker([&] {
    absl::SleepFor(absl::Milliseconds(30));
    readable.store(true);
    b.Poke();
  });
  absl::StatusOr<int64_t> all = b.WaitForAll(
      absl::Now() + absl::Seconds(10), [&](int64_t, absl::Time) {
        ++calls;
        if (!readable.load()) return false;
        for (const Partition& p : parts) b.Received(p.id, p.size, 7, false);
        return true;
      });
  poker.join();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, 7);
  EXPECT_GE(calls, 2);

  // Without a Poke or an arrival a pump that has nothing ends at the
  // deadline; a failure ends it at once, and stopped() says so.
  Arrivals c(&layout);
  EXPECT_EQ(c.WaitForClock(1, absl::Now() + absl::Milliseconds(20), &stop,
                           [](int32_t) {},
                           [](int64_t, absl::Time) { return false; })
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(c.stopped());
  c.Fail(absl::UnavailableError("shard gone"));
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.WaitForClock(1, absl::InfiniteFuture(), &stop, [](int32_t) {},
                           [](int64_t, absl::Time) { return true; })
                .code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace fulcrum
