// One partition of a job on a shard: its values, optimizer state and
// version, and the current step's aggregation, all under the partition's own
// lock (pushes to different partitions proceed in parallel). The fields an
// aggregation algorithm owns are grouped by algorithm.
#ifndef FULCRUM_SERVER_PS_PARTITION_STATE_H_
#define FULCRUM_SERVER_PS_PARTITION_STATE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/concurrency/wait_list.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor/layout.h"
#include "server/ps/data_ledger.h"
#include "server/ps/partition_format.h"
#include "server/ps/push_tracker.h"

namespace fulcrum {

struct PartitionState {
  Partition meta;
  int64_t num_chunks = 0;  // of chunk_elems each (the last may be shorter)
  bool tracks_ledger = false;  // partition 0 holds the job's data ledger
  // Elements of buffer tensors ([begin, end) from meta.offset): pushes
  // carry their values, and a step keeps the pushes' average there instead
  // of the optimizer's update (SetBuffers).
  std::vector<std::pair<int64_t, int64_t>> buffers;

  absl::Mutex mu;
  absl::CondVar changed;  // version, generation or ended changed
  // Reads waiting without a thread (JobShard::OnVersion).
  WaitList<absl::Status> waits ABSL_GUARDED_BY(mu);
  // Version, generation, ended or rejected changed: wakes the blocked
  // waits and decides the others'.
  void Changed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    changed.SignalAll();
    waits.Changed();
  }
  std::vector<float> params ABSL_GUARDED_BY(mu);
  std::vector<float> state ABSL_GUARDED_BY(mu);  // optimizer state
  int64_t version ABSL_GUARDED_BY(mu) = 0;  // updates applied (sync: steps)
  int64_t updates ABSL_GUARDED_BY(mu) = 0;  // optimizer steps (Adam's k)
  bool stop ABSL_GUARDED_BY(mu) = false;    // a worker asked to stop here
  bool ended ABSL_GUARDED_BY(mu) = false;
  int64_t generation ABSL_GUARDED_BY(mu) = 1;  // whose pushes it takes
  PushTracker tracker ABSL_GUARDED_BY(mu);     // the current step's arrivals
  // External models: the chunks of values a member uploaded (Initialize)
  // while the job waits for them.
  std::vector<uint8_t> uploaded ABSL_GUARDED_BY(mu);
  int64_t uploaded_count ABSL_GUARDED_BY(mu) = 0;
  DataLedger ledger ABSL_GUARDED_BY(mu);       // if tracks_ledger
  // Updates refused because a value would have become non-finite (NaN or
  // infinite): how many, and the last one's step and the member whose push
  // held the largest element. Sync holds that step back: `held` until the
  // generation changes (the culprit's read fails, the others re-join).
  struct Rejected {
    int64_t count = 0;
    int64_t step = -1;
    int member = -1;
    float largest = 0.0f;
    bool held = false;
  } rejected ABSL_GUARDED_BY(mu);

  // Sync barrier (sync_aggregator.cc).
  struct Barrier {
    // Sum of g_i * n_i; chunk k's part holds this step's values once
    // written[k] (its first push writes it, later ones add; a chunk no
    // push reached is zeroed before the update): no clearing pass a step.
    std::vector<float> accum;
    std::vector<uint8_t> written;
    bool stop_requested = false;
    std::vector<DataRange> ranges;  // this step's, per member
    // When the first member completed its push of the step (stall
    // inspector); InfiniteFuture when none has.
    absl::Time first_done = absl::InfiniteFuture();
    // The values and optimizer state before the last applied step, so
    // that a membership change can undo a step not every partition
    // applied. The optimizer writes out of place and the buffers swap.
    std::vector<float> prev_params, prev_state;
    bool can_undo = false;
    bool undo_swaps = false;  // the last step changed values
  } barrier ABSL_GUARDED_BY(mu);

  // Apply on arrival, ssp/async (arrival_aggregator.cc).
  struct Arrivals {
    std::vector<float> staging;  // [member * size + i] until complete
    std::vector<int64_t> member_step;  // the step each member pushes
    // Where an update is written out of place, then swapped in.
    std::vector<float> next_params, next_state;
  } arrivals ABSL_GUARDED_BY(mu);
};

// The partition's state as a PartitionFormat blob. REQUIRES: p.mu held.
inline std::string SaveLocked(const PartitionState& p, int slots)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  PartitionImage image;
  image.partition = p.meta.id;
  image.slots = slots;
  image.size = p.meta.size;
  image.version = p.version;
  image.updates = p.updates;
  image.values = p.params.data();
  image.state = p.state.data();
  image.ledger = &p.ledger.entries();
  return EncodePartition(image);
}

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_PARTITION_STATE_H_
