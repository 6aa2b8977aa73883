// The synchronous barrier (see aggregator.h).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/ps/aggregator.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

class SyncAggregator : public Aggregator {
 public:
  explicit SyncAggregator(Context context) : ctx_(std::move(context)) {}

  void Init(PartitionState& p, int members) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    p.barrier.accum.assign(p.meta.size, 0.0f);
    p.barrier.prev_params.assign(p.meta.size, 0.0f);
    p.barrier.prev_state.assign(p.state.size(), 0.0f);
    ResetStep(p, members);
  }

  absl::StatusOr<PushOutcome> Push(PartitionState& p,
                                   absl::Span<const int> members,
                                   const PushChunk& c) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (c.step < p.version) return PushOutcome::kAlreadyComplete;  // a retry
    if (c.step > p.version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "push.step ", c.step, " is ahead of partition ", c.partition,
          " version ", p.version, " (sync mode: pull the new version first)"));
    }
    ASSIGN_OR_RETURN(const int complete, CheckMembers(p, members, c));
    if (complete == static_cast<int>(members.size()))
      return PushOutcome::kAlreadyComplete;
    const int64_t chunk = c.samples == 0 ? 0 : c.offset / ctx_.chunk_elems;
    // Each member's record; the push is new when any member's is (a
    // member with no samples is complete with the push's first chunk).
    bool fresh = false;
    for (size_t i = 0; i < members.size(); ++i) {
      // CheckMembers made sure that Record cannot refuse here.
      ASSIGN_OR_RETURN(const PushTracker::Arrival arrival,
                       p.tracker.Record(members[i], chunk, Share(c, i),
                                        c.largest));
      fresh |= arrival == PushTracker::Arrival::kNew;
    }
    if (!fresh) return PushOutcome::kPartial;  // a repeated chunk
    PartitionState::Barrier& b = p.barrier;
    b.stop_requested |= c.stop;
    if (p.tracks_ledger && c.samples > 0) {
      for (size_t i = 0; i < members.size(); ++i) {
        if (Share(c, i) > 0)
          b.ranges[members[i]] = c.shares.empty() ? c.range : c.shares[i].range;
      }
    }
    if (c.samples > 0) Accumulate(p, c);
    for (int member : members)
      if (!p.tracker.Complete(member)) return PushOutcome::kPartial;
    if (p.tracker.complete_count() == static_cast<int>(members.size()))
      b.first_done = ctx_.env->Now();
    if (p.tracker.complete_count() < p.tracker.members())
      return PushOutcome::kCompleted;
    ApplyStep(p);
    return PushOutcome::kCompleted;
  }

  void ResetStep(PartitionState& p, int members) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    PartitionState::Barrier& b = p.barrier;
    b.written.assign(p.num_chunks, 0);
    b.stop_requested = false;
    b.ranges.assign(members, DataRange{});
    b.first_done = absl::InfiniteFuture();
    p.rejected.held = false;
    p.tracker.Reset(members, p.num_chunks);
  }

  void Restored(PartitionState& p) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    p.barrier.can_undo = false;
    p.stop = false;
    ResetStep(p, p.tracker.members());
  }

  absl::Status CheckAlign(const PartitionState& p,
                          int64_t to) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (p.version == to || (p.version == to + 1 && p.barrier.can_undo))
      return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("partition ", p.meta.id, " is at version ", p.version,
                     " and cannot be aligned to ", to));
  }

  void Align(PartitionState& p, int64_t to, int) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (p.version != to + 1) return;
    // Undo the step that not every partition applied: a buffer swap.
    PartitionState::Barrier& b = p.barrier;
    if (b.undo_swaps) {
      p.params.swap(b.prev_params);
      p.state.swap(b.prev_state);
      --p.updates;
    }
    p.ledger.UndoStep();
    --p.version;
    b.can_undo = false;
    p.stop = false;
  }

 private:
  // How many of `members` are complete for the step: all or none (a
  // member pushed by another stream too is FAILED_PRECONDITION), or the
  // samples a member's earlier chunks had (INVALID_ARGUMENT). Changes
  // nothing, so that a refused push leaves no member half-recorded.
  static absl::StatusOr<int> CheckMembers(const PartitionState& p,
                                          absl::Span<const int> members,
                                          const PushChunk& c)
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    int complete = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      const bool done = p.tracker.Complete(members[i]);
      complete += done ? 1 : 0;
      // A group's shares must stay the same in every chunk of the step,
      // also for a member its first chunk completed (no samples).
      if (!done || members.size() > 1)
        RETURN_IF_ERROR(p.tracker.CheckSamples(members[i], Share(c, i)));
    }
    if (complete != 0 && complete != static_cast<int>(members.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "push: ", complete, " of the ", members.size(),
          " members it is for already pushed step ", c.step, " of partition ",
          c.partition, " on another stream"));
    }
    return complete;
  }

  // The samples of the i-th member a push is for.
  static int64_t Share(const PushChunk& c, size_t i) {
    return c.shares.empty() ? c.samples : c.shares[i].samples;
  }

  // Straight from the pieces the push arrived in; the chunk's first push
  // of the step writes, the others add.
  void Accumulate(PartitionState& p, const PushChunk& c) const
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    PartitionState::Barrier& b = p.barrier;
    const int64_t chunk = c.offset / ctx_.chunk_elems;
    float* acc = b.accum.data() + c.offset;
    const float w = static_cast<float>(c.samples);
    if (b.written[chunk]) {
      AddChunk(c, w, acc);
      return;
    }
    SetChunk(c, std::min(ctx_.chunk_elems, p.meta.size - c.offset), w, acc);
    b.written[chunk] = 1;
  }

  // Zeroes the chunks no push of the step reached (every member's push was
  // empty there), so that the update reads the step's sum everywhere.
  void ZeroUnwritten(PartitionState& p) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    PartitionState::Barrier& b = p.barrier;
    for (int64_t k = 0; k < static_cast<int64_t>(b.written.size()); ++k) {
      if (b.written[k]) continue;
      const int64_t begin = k * ctx_.chunk_elems;
      const int64_t end = std::min(begin + ctx_.chunk_elems, p.meta.size);
      std::fill(b.accum.begin() + begin, b.accum.begin() + end, 0.0f);
      b.written[k] = 1;
    }
  }

  // Every member has pushed: apply the averaged gradient out of place, so
  // that the previous version stays for an undo. A step that carries a
  // stop applies nothing: the final parameters are the ones rank 0
  // evaluated when it decided to stop.
  void ApplyStep(PartitionState& p) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    PartitionState::Barrier& b = p.barrier;
    const int64_t total = p.tracker.total_samples();
    const bool apply = total > 0 && !b.stop_requested;
    b.undo_swaps = apply;
    if (apply) {
      ZeroUnwritten(p);
      const float scale = 1.0f / static_cast<float>(total);
      const bool finite =
          ApplyUpdate(ctx_.optimizer, p.version, p.updates, b.accum.data(),
                      p.params.data(), p.state.data(), b.prev_params.data(),
                      b.prev_state.data(), p.meta.size, scale) &
          SetBuffers(p.buffers, b.accum.data(), scale, b.prev_params.data());
      if (!finite) {
        HoldBack(p);
        return;
      }
      ++p.updates;
      p.params.swap(b.prev_params);
      p.state.swap(b.prev_state);
    }
    b.can_undo = true;
    if (p.tracks_ledger)
      p.ledger.ApplyStep(apply ? b.ranges : std::vector<DataRange>());
    ++p.version;
    if (ctx_.checkpointer != nullptr &&
        p.version % ctx_.checkpoint_every == 0) {
      // Every partition of the shard reaches this version before any
      // passes it: the blobs of one version form a consistent cut.
      ctx_.checkpointer->Add(p.version, p.meta.id,
                             SaveLocked(p, ctx_.optimizer.StateSlots()));
    }
    p.stop = b.stop_requested;
    ResetStep(p, p.tracker.members());
    p.Changed();
  }

  // The step's update would have made a value non-finite: it is not
  // applied (the values written out of place are dropped) and the
  // partition stays at this version until the generation changes. The
  // member whose push held the largest element is named; its read fails
  // (JobShard::WaitForVersion), the others' end with the generation.
  void HoldBack(PartitionState& p) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    PartitionState::Rejected& r = p.rejected;
    ++r.count;
    r.step = p.version;
    r.member = p.tracker.LargestMember();
    r.largest = p.tracker.Largest(r.member);
    r.held = true;
    p.Changed();
  }

  const Context ctx_;
};

}  // namespace

std::unique_ptr<Aggregator> NewSyncAggregator(Aggregator::Context context) {
  return std::make_unique<SyncAggregator>(std::move(context));
}

}  // namespace fulcrum
