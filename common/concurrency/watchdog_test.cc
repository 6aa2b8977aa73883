#include "common/concurrency/watchdog.h"

#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(WatchdogTest, FiresOncePastTheDeadlineUnlessDisarmedOrRearmed) {
  Watchdog dog(absl::Milliseconds(5));
  std::atomic<int> fired{0}, disarmed{0}, rearmed{0};
  const absl::Time soon = absl::Now() + absl::Milliseconds(30);
  const uint64_t a = dog.Arm(soon, [&] { ++fired; });
  const uint64_t b = dog.Arm(soon, [&] { ++disarmed; });
  const uint64_t c = dog.Arm(soon, [&] { ++rearmed; });
  EXPECT_FALSE(dog.Disarm(b));
  EXPECT_TRUE(dog.Rearm(c, absl::InfiniteFuture()));
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (fired.load() == 0 && absl::Now() < until)
    absl::SleepFor(absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(50));  // more ticks: still once
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(disarmed.load(), 0);
  EXPECT_EQ(rearmed.load(), 0);
  EXPECT_FALSE(dog.Rearm(a, absl::InfiniteFuture())) << "fired already";
  EXPECT_TRUE(dog.Disarm(a));
  EXPECT_FALSE(dog.Disarm(c));
  EXPECT_EQ(dog.armed(), 0u);
}

TEST(WatchdogTest, AMovingDeadlineIsReadAtEachTick) {
  Watchdog dog(absl::Milliseconds(5));
  std::atomic<int> fired{0};
  Watchdog::Deadline deadline(absl::InfiniteFuture());
  const uint64_t id = dog.Arm(&deadline, [&] { ++fired; });
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(fired.load(), 0) << "no deadline yet";
  deadline.Set(absl::Now());
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (fired.load() == 0 && absl::Now() < until)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(fired.load(), 1);
  EXPECT_TRUE(dog.Disarm(id));
}

}  // namespace
}  // namespace fulcrum
