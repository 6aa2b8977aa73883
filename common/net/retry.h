// Retrying a call with bounded exponential backoff and full jitter: the one
// retry loop every client in Fulcrum uses. No gRPC types: callers convert
// their RPC's status (common/status/grpc_status.h) inside `attempt`.
#ifndef FULCRUM_COMMON_NET_RETRY_H_
#define FULCRUM_COMMON_NET_RETRY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"

namespace fulcrum {

struct RetryOptions {
  std::chrono::milliseconds initial{100};
  std::chrono::milliseconds max{2000};
  int max_attempts = 0;    // 0: until it succeeds or is cancelled
  bool retry_all = false;  // else only UNAVAILABLE and DEADLINE_EXCEEDED
  // Retried besides those two (e.g. RESOURCE_EXHAUSTED: a limit may free).
  std::vector<absl::StatusCode> also_retry;
};

// Calls `attempt` until it returns OK, returns a status that is not retried,
// runs out of attempts, or `cancel` (may be null) is notified, in which case
// the result is CANCELLED. `on_retry` (may be null) sees each retried failure.
absl::Status RetryWithBackoff(
    const std::function<absl::Status()>& attempt, const RetryOptions& options,
    absl::Notification* cancel,
    const std::function<void(const absl::Status&)>& on_retry = nullptr);

// Exponential backoff with full jitter, bounded by `max`: attempt 0 waits up
// to `initial`, each later attempt doubles the bound.
std::chrono::milliseconds Backoff(int attempt,
                                  std::chrono::milliseconds initial,
                                  std::chrono::milliseconds max,
                                  uint64_t random);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_RETRY_H_
