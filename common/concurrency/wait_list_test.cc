#include "common/concurrency/wait_list.h"

#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// The owner's state: a value under a lock, waits for it to reach a bound.
struct Owner {
  absl::Mutex mu;
  int value ABSL_GUARDED_BY(mu) = 0;
  WaitList<int> waits ABSL_GUARDED_BY(mu);

  uint64_t WaitFor(int at_least, std::function<void(int)> done) {
    absl::MutexLock lock(&mu);
    return waits.Add(
        [this, at_least]() -> std::optional<int> {
          mu.AssertHeld();
          if (value >= at_least) return value;
          return std::nullopt;
        },
        std::move(done));
  }
  void Set(int v) {
    DeferredCalls scope;
    absl::MutexLock lock(&mu);
    value = v;
    waits.Changed();
  }
};

TEST(WaitListTest, DecidedWaitsRunAfterTheLockOnTheChangingThread) {
  Owner owner;
  std::vector<int> got;
  bool lock_free = false;
  owner.WaitFor(2, [&](int v) {
    got.push_back(v);
    // The callback may take the owner's lock: the change released it.
    lock_free = owner.mu.TryLock();
    if (lock_free) owner.mu.Unlock();
  });
  owner.WaitFor(5, [&](int v) { got.push_back(100 + v); });
  owner.Set(1);
  EXPECT_TRUE(got.empty());
  owner.Set(3);
  EXPECT_EQ(got, std::vector<int>({3}));  // ran before Set returned
  EXPECT_TRUE(lock_free);
  owner.Set(7);
  EXPECT_EQ(got, std::vector<int>({3, 107}));
  absl::MutexLock lock(&owner.mu);
  EXPECT_EQ(owner.waits.size(), 0u);
}

TEST(WaitListTest, ACancelledWaitNeverRunsAndADecidedOneCannotBeCancelled) {
  Owner owner;
  int runs = 0;
  const uint64_t a = owner.WaitFor(2, [&](int) { ++runs; });
  const uint64_t b = owner.WaitFor(2, [&](int) { ++runs; });
  {
    absl::MutexLock lock(&owner.mu);
    EXPECT_TRUE(owner.waits.Cancel(a));
    EXPECT_FALSE(owner.waits.Cancel(a));
  }
  owner.Set(2);
  EXPECT_EQ(runs, 1);  // b only
  absl::MutexLock lock(&owner.mu);
  EXPECT_FALSE(owner.waits.Cancel(b));
}

TEST(WaitListTest, OnlyTheOutermostScopeRunsAndCallsMayDeferMore) {
  std::vector<int> order;
  {
    DeferredCalls outer;
    {
      DeferredCalls inner;
      DeferredCalls::Defer([&] {
        order.push_back(1);
        DeferredCalls::Defer([&] { order.push_back(3); });
      });
    }
    EXPECT_TRUE(order.empty());  // the inner scope ran nothing
    DeferredCalls::Defer([&] { order.push_back(2); });
  }
  EXPECT_EQ(order, std::vector<int>({1, 2, 3}));
}

TEST(WaitListTest, WithoutAScopeACallRunsOnAnotherThread) {
  const int64_t before = DeferredCalls::unscoped();
  absl::Notification ran;
  DeferredCalls::Defer([&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(DeferredCalls::unscoped(), before + 1);
}

}  // namespace
}  // namespace fulcrum
