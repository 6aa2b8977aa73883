#include "common/concurrency/executor.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(ThreadPoolTest, RunsTasksConcurrentlyAndDrainsOnStop) {
  ThreadPool pool(2);
  pool.Start();
  absl::Notification release;
  std::atomic<int> done{0};
  // Two tasks block; a third still runs once one of them is released, and
  // a blocked task does not hold the caller.
  pool.Schedule([&] { release.WaitForNotification(); ++done; });
  pool.Schedule([&] { release.WaitForNotification(); ++done; });
  pool.Schedule([&] { ++done; });
  release.Notify();
  pool.Stop();
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(pool.pending(), 0);
  bool ran = false;
  pool.Schedule([&] { ran = true; });  // after Stop: inline
  EXPECT_TRUE(ran);
}

TEST(ThreadPoolTest, AnUnstartedPoolRunsItsQueueOnStop) {
  ThreadPool pool(1);
  int runs = 0;
  pool.Schedule([&] { ++runs; });
  EXPECT_EQ(pool.pending(), 1);
  pool.Stop();
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace fulcrum
