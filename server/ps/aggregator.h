// How a shard turns its members' pushes for a partition into updates: one
// algorithm per file behind this interface, as gloo keeps one collective
// per file.
//
// - SyncAggregator (sync_aggregator.cc), sync and ssp(0): a barrier per
//   step. Pushes for step v accumulate sum(g_i n_i) until every member of
//   the generation has pushed all of its chunks (or an empty push,
//   samples = 0); the last one applies sum(g_i n_i) / sum(n_i) through the
//   optimizer, out of place, and makes version v + 1 readable. A step that
//   carries a stop applies nothing.
//   A pre-reduced push (wire.pre_reduce) stands for several members: it
//   carries sum(g_i n_i) / sum(n_i) with their summed samples and counts
//   as each one's push, so the step's update is the same.
// - ArrivalAggregator (arrival_aggregator.cc), ssp(s > 0) and async: each
//   member's gradient is applied as soon as all its chunks arrived, scaled
//   by n_i / (batch_size * members) so that one step of every member moves
//   as far as one sync step. Reads are gated by the ClockTable instead.
//
// Thread safety: an Aggregator holds only configuration; every call
// REQUIRES the partition's lock (p.mu), which the JobShard takes.
#ifndef FULCRUM_SERVER_PS_AGGREGATOR_H_
#define FULCRUM_SERVER_PS_AGGREGATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/env/env.h"
#include "server/ps/checkpoint.h"
#include "server/ps/clocks.h"
#include "server/ps/optimizer.h"
#include "server/ps/partition_state.h"
#include "server/ps/push_tracker.h"

namespace fulcrum {

class Aggregator {
 public:
  struct Context {
    std::string job_id;
    OptimizerConfig optimizer;
    int64_t chunk_elems = 1 << 18;
    int64_t batch_size = 1;  // per worker, for the arrival scaling
    Env* env = nullptr;      // Not owned: the clock of the stall inspector.
    // Not owned, may be null: sync writes a checkpoint of a partition at
    // every multiple of checkpoint_every (a consistent cut per version).
    CheckpointWriter* checkpointer = nullptr;
    int64_t checkpoint_every = 0;
    const ClockTable* clocks = nullptr;  // Not owned: the active members.
  };

  virtual ~Aggregator() = default;

  // Allocates the algorithm's buffers of a new partition.
  virtual void Init(PartitionState& p, int members) const = 0;
  // Applies one validated chunk of `members` (one member; or, pre-reduced,
  // the members c.shares are for, in that order); the JobShard checked that
  // the partition has not ended and that the chunk's generation is
  // current. A rejected chunk (FAILED_PRECONDITION: a step ahead, or a
  // member already pushed the step on another stream; INVALID_ARGUMENT)
  // changes nothing.
  virtual absl::StatusOr<PushOutcome> Push(PartitionState& p,
                                           absl::Span<const int> members,
                                           const PushChunk& c) const = 0;
  // Drops the current step's half-aggregated pushes; `members` members from
  // now on.
  virtual void ResetStep(PartitionState& p, int members) const = 0;
  // The values were replaced (a restore): nothing can be undone.
  virtual void Restored(PartitionState& p) const = 0;
  // Reconfigure phase 2: OK when the partition can be brought to version
  // `to` (sync: it is there or one undoable step ahead), FAILED_PRECONDITION
  // otherwise; Align then does it, every member resuming at `to`.
  virtual absl::Status CheckAlign(const PartitionState& p,
                                  int64_t to) const = 0;
  virtual void Align(PartitionState& p, int64_t to, int members) const = 0;
};

std::unique_ptr<Aggregator> NewSyncAggregator(Aggregator::Context context);
std::unique_ptr<Aggregator> NewArrivalAggregator(Aggregator::Context context);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_AGGREGATOR_H_
