#include "server/ps/clocks.h"

#include <thread>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

const absl::Time kFar = absl::InfiniteFuture();

TEST(ClockTableTest, ClockAdvancesWhenEveryPartitionIsDone) {
  ClockTable t(2, 3);
  EXPECT_FALSE(t.PartitionDone(0, 0));
  EXPECT_FALSE(t.PartitionDone(0, 0));
  EXPECT_TRUE(t.PartitionDone(0, 0));
  EXPECT_EQ(t.Clock(0), 1);
  EXPECT_EQ(t.Clock(1), 0);
}

TEST(ClockTableTest, SspBoundWaitsForTheSlowestAndRecordsStaleness) {
  ClockTable t(2, 1);
  for (int64_t s = 0; s < 3; ++s) t.PartitionDone(0, s);  // member 0 at clock 3
  // Read at clock 3 with bound 3: member 1 at 0 >= 0, no wait, staleness 3.
  auto r = t.WaitForRead(3, 3, kFar, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3);
  // With bound 1 it must wait until member 1 reaches clock 2.
  EXPECT_EQ(t.WaitForRead(3, 1, absl::Now() + absl::Milliseconds(30), nullptr)
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread slow([&] {
    absl::SleepFor(absl::Milliseconds(30));
    t.PartitionDone(1, 0);
    t.PartitionDone(1, 1);
  });
  r = t.WaitForRead(3, 1, kFar, nullptr);
  slow.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1);
  // Async (no bound) never waits.
  r = t.WaitForRead(10, -1, absl::Now(), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 8);
  StalenessStats s = t.Stats();
  EXPECT_EQ(s.reads, 3);
  EXPECT_EQ(s.max, 8);
  EXPECT_EQ(s.sum, 3 + 1 + 8);
  EXPECT_EQ(s.counts[3], 1);
  EXPECT_EQ(s.counts[8], 1);
}

TEST(ClockTableTest, FinishedAndRemovedMembersAreNotWaitedFor) {
  ClockTable t(3, 1);
  t.PartitionDone(0, 0);
  std::thread leaver([&] {
    absl::SleepFor(absl::Milliseconds(20));
    t.Finish(1);
    absl::SleepFor(absl::Milliseconds(20));
    t.Remove(2);
  });
  auto r = t.WaitForRead(1, 0, kFar, nullptr);
  leaver.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0);
  EXPECT_EQ(t.ActiveMembers(), 2);  // finished still counts, removed does not
}

TEST(ClockTableTest, EndAndCancelStopWaits) {
  ClockTable t(2, 1);
  EXPECT_EQ(t.WaitForRead(5, 0, kFar, [] { return true; }).status().code(),
            absl::StatusCode::kCancelled);
  std::thread ender([&] {
    absl::SleepFor(absl::Milliseconds(20));
    t.End();
  });
  EXPECT_EQ(t.WaitForRead(5, 0, kFar, nullptr).status().code(),
            absl::StatusCode::kAborted);
  ender.join();
}

TEST(ClockTableTest, OnReadIsDecidedByTheChangeThatAllowsIt) {
  ClockTable t(2, 1);
  std::vector<absl::StatusOr<int64_t>> got;
  auto done = [&](absl::StatusOr<int64_t> r) { got.push_back(r); };
  uint64_t id = 0;
  // ssp(1): a read at clock 2 waits until both members reach clock 1.
  EXPECT_FALSE(t.OnRead(2, 1, -1, done, &id).has_value());
  t.PartitionDone(0, 0);
  EXPECT_TRUE(got.empty());
  t.PartitionDone(1, 0);  // decides it before returning
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_EQ(*got[0], 1);  // staleness recorded as for WaitForRead
  EXPECT_EQ(t.Stats().reads, 1);
  // Allowed now: returned, not called back.
  std::optional<absl::StatusOr<int64_t>> now = t.OnRead(2, 1, -1, done, &id);
  ASSERT_TRUE(now.has_value() && now->ok());
  EXPECT_EQ(got.size(), 1u);
  // Cancelled: never called; pending at End: ABORTED.
  uint64_t cancelled = 0;
  EXPECT_FALSE(t.OnRead(9, 0, -1, done, &cancelled).has_value());
  EXPECT_TRUE(t.CancelRead(cancelled));
  EXPECT_FALSE(t.OnRead(9, 0, -1, done, &id).has_value());
  t.End();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(t.CancelRead(id));
}

}  // namespace
}  // namespace fulcrum
