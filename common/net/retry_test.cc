#include "common/net/retry.h"

#include <thread>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

using std::chrono::milliseconds;

RetryOptions Fast(int max_attempts, bool retry_all = false) {
  RetryOptions o;
  o.initial = milliseconds(1);
  o.max = milliseconds(5);
  o.max_attempts = max_attempts;
  o.retry_all = retry_all;
  return o;
}

TEST(RetryTest, RetriesUnavailableUntilSuccess) {
  int calls = 0, retried = 0;
  absl::Status s = RetryWithBackoff(
      [&] {
        return ++calls < 4 ? absl::UnavailableError("down")
                           : absl::OkStatus();
      },
      Fast(0), nullptr, [&](const absl::Status&) { ++retried; });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(retried, 3);
}

TEST(RetryTest, DoesNotRetryOtherCodesUnlessAsked) {
  int calls = 0;
  auto invalid = [&] {
    ++calls;
    return absl::InvalidArgumentError("bad");
  };
  EXPECT_EQ(RetryWithBackoff(invalid, Fast(0), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_EQ(RetryWithBackoff(invalid, Fast(3, true), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 3);  // bounded by max_attempts
}

TEST(RetryTest, CancelStopsTheLoop) {
  absl::Notification cancel;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(30));
    cancel.Notify();
  });
  absl::Status s = RetryWithBackoff(
      [] { return absl::UnavailableError("down"); },
      Fast(0), &cancel);
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

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
