// Retrying an RPC with bounded exponential backoff and full jitter: the one
// retry loop every client in Fulcrum uses.
#ifndef FULCRUM_COMMON_NET_RETRY_H_
#define FULCRUM_COMMON_NET_RETRY_H_

#include <grpcpp/support/status.h>

#include <chrono>
#include <functional>

#include "absl/synchronization/notification.h"

namespace fulcrum {

struct RetryOptions {
  std::chrono::milliseconds initial{100};
  std::chrono::milliseconds max{2000};
  int max_attempts = 0;    // 0: until it succeeds or is cancelled
  bool retry_all = false;  // else only UNAVAILABLE and DEADLINE_EXCEEDED
};

// Calls `attempt` until it returns OK, returns a status that is not retried,
// runs out of attempts, or `cancel` (may be null) is notified, in which case
// the result is CANCELLED. `on_retry` (may be null) sees each retried failure.
grpc::Status RetryWithBackoff(
    const std::function<grpc::Status()>& attempt, const RetryOptions& options,
    absl::Notification* cancel,
    const std::function<void(const grpc::Status&)>& on_retry = nullptr);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_RETRY_H_
