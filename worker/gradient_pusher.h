// Pushes a step's gradient partition by partition as backward produces it -
// one of the Trainer's parts. Backward reports, layer by layer, from which
// element on the flat gradient is final; every partition wholly past that
// point is pushed at once (host memory), or, on a device, its bucket is
// copied to the host on the backend's copy stream while backward goes on
// and pushed once the copy has landed (in backward's order). Communication
// thus overlaps the rest of backward, as PyTorch DDP's buckets do.
//
// Thread safety: none; the training thread owns it.
#ifndef FULCRUM_WORKER_GRADIENT_PUSHER_H_
#define FULCRUM_WORKER_GRADIENT_PUSHER_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor/layout.h"
#include "worker/backend/backend.h"
#include "worker/worker_session.h"

namespace fulcrum {

class GradientPusher {
 public:
  using Clock = std::chrono::steady_clock;

  // Not owned, must outlive it: `grads` is the host gradient the session
  // reads, `grads_dev` the backend's (the same memory on a host backend).
  GradientPusher(Backend* backend, const ParameterLayout* layout,
                 WorkerSession* session, float* grads, const float* grads_dev);

  // Starts step `step`'s pushes of a gradient over `samples` samples.
  void Begin(int64_t step, int64_t samples, bool stop, PushRange range);
  // Backward's callback: the gradient of elements >= ready_from is final.
  void Ready(int64_t ready_from);
  // After backward: pushes the buckets that waited for their copies.
  // Returns the backend's status.
  absl::Status Finish();
  // A step without samples: an empty push of every partition.
  void PushEmpty(int64_t step, bool stop);
  // When the step's first push was queued (epoch: none yet).
  Clock::time_point first_push() const { return first_push_; }

 private:
  void PushPartitions(int64_t from, int64_t down_to);  // partition ids, descending

  Backend* const backend_;        // Not owned.
  const ParameterLayout* const layout_;  // Not owned.
  WorkerSession* const session_;  // Not owned.
  float* const grads_;            // Not owned.
  const float* const grads_dev_;  // Not owned.
  const bool host_;  // backend memory is host memory: no copies
  // The step being pushed.
  int64_t step_ = 0, samples_ = 0;
  bool stop_ = false;
  PushRange range_;
  int64_t next_ = 0;  // the next partition to push (backward: last first)
  Clock::time_point first_push_;
  // Device: bucket copies in flight (ticket, partitions first >= last).
  struct PendingCopy {
    int ticket;
    int64_t first, last;
  };
  std::vector<PendingCopy> pending_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_GRADIENT_PUSHER_H_
