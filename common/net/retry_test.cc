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
  grpc::Status s = RetryWithBackoff(
      [&] {
        return ++calls < 4 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")
                           : grpc::Status::OK;
      },
      Fast(0), nullptr, [&](const grpc::Status&) { ++retried; });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(retried, 3);
}

TEST(RetryTest, DoesNotRetryOtherCodesUnlessAsked) {
  int calls = 0;
  auto invalid = [&] {
    ++calls;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad");
  };
  EXPECT_EQ(RetryWithBackoff(invalid, Fast(0), nullptr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_EQ(RetryWithBackoff(invalid, Fast(3, true), nullptr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(calls, 3);  // bounded by max_attempts
}

TEST(RetryTest, CancelStopsTheLoop) {
  absl::Notification cancel;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(30));
    cancel.Notify();
  });
  grpc::Status s = RetryWithBackoff(
      [] { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"); },
      Fast(0), &cancel);
  canceller.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace fulcrum
