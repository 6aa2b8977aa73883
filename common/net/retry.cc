#include "common/net/retry.h"

#include <algorithm>
#include <random>

#include "absl/time/clock.h"

namespace fulcrum {

absl::Status RetryWithBackoff(
    const std::function<absl::Status()>& attempt, const RetryOptions& options,
    absl::Notification* cancel,
    const std::function<void(const absl::Status&)>& on_retry) {
  std::mt19937_64 rng(std::random_device{}());
  for (int n = 0;; ++n) {
    if (cancel != nullptr && cancel->HasBeenNotified())
      return absl::CancelledError("cancelled while retrying");
    absl::Status s = attempt();
    if (s.ok()) return s;
    const bool retryable = options.retry_all ||
                           s.code() == absl::StatusCode::kUnavailable ||
                           s.code() == absl::StatusCode::kDeadlineExceeded ||
                           std::find(options.also_retry.begin(),
                                     options.also_retry.end(),
                                     s.code()) != options.also_retry.end();
    if (!retryable ||
        (options.max_attempts > 0 && n + 1 >= options.max_attempts))
      return s;
    if (on_retry) on_retry(s);
    const absl::Duration wait =
        absl::FromChrono(Backoff(n, options.initial, options.max, rng()));
    if (cancel != nullptr) {
      if (cancel->WaitForNotificationWithTimeout(wait))
        return absl::CancelledError("cancelled while retrying");
    } else {
      absl::SleepFor(wait);
    }
  }
}

std::chrono::milliseconds Backoff(int attempt,
                                  std::chrono::milliseconds initial,
                                  std::chrono::milliseconds max,
                                  uint64_t random) {
  const int shift = std::min(attempt, 20);
  const int64_t bound =
      std::min<int64_t>(max.count(), initial.count() << shift);
  return std::chrono::milliseconds(
      bound <= 0 ? 0 : static_cast<int64_t>(random % (bound + 1)));
}

}  // namespace fulcrum
