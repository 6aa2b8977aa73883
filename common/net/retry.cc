#include "common/net/retry.h"

#include <random>

#include "absl/time/clock.h"
#include "common/net/grpc_options.h"

namespace fulcrum {

grpc::Status RetryWithBackoff(
    const std::function<grpc::Status()>& attempt, const RetryOptions& options,
    absl::Notification* cancel,
    const std::function<void(const grpc::Status&)>& on_retry) {
  std::mt19937_64 rng(std::random_device{}());
  for (int n = 0;; ++n) {
    if (cancel != nullptr && cancel->HasBeenNotified()) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "cancelled while retrying");
    }
    grpc::Status s = attempt();
    if (s.ok()) return s;
    const bool retryable =
        options.retry_all || s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!retryable ||
        (options.max_attempts > 0 && n + 1 >= options.max_attempts))
      return s;
    if (on_retry) on_retry(s);
    const absl::Duration wait =
        absl::FromChrono(Backoff(n, options.initial, options.max, rng()));
    if (cancel != nullptr) {
      if (cancel->WaitForNotificationWithTimeout(wait)) {
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            "cancelled while retrying");
      }
    } else {
      absl::SleepFor(wait);
    }
  }
}

}  // namespace fulcrum
