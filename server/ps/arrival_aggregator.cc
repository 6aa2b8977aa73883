// Apply on arrival, for ssp(s > 0) and async (see aggregator.h).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/ps/aggregator.h"
#include "common/status/payloads.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

class ArrivalAggregator : public Aggregator {
 public:
  explicit ArrivalAggregator(Context context) : ctx_(std::move(context)) {}

  void Init(PartitionState& p, int members) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    p.arrivals.member_step.assign(members, 0);
    p.arrivals.next_params.assign(p.meta.size, 0.0f);
    p.arrivals.next_state.assign(p.state.size(), 0.0f);
    ResetStep(p, members);
  }

  absl::StatusOr<PushOutcome> Push(PartitionState& p,
                                   absl::Span<const int> members,
                                   const PushChunk& c) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (members.size() != 1 || !c.shares.empty()) {
      // WorkerStream::Open admits groups in sync jobs only.
      return absl::FailedPreconditionError(
          "push.shares: pre-reduced pushes need consistency sync");
    }
    const int member = members[0];
    PartitionState::Arrivals& a = p.arrivals;
    const int64_t expected = a.member_step[member];
    if (c.step < expected) return PushOutcome::kAlreadyComplete;  // a retry
    if (c.step > expected) {
      return absl::FailedPreconditionError(
          absl::StrCat("push.step ", c.step, " is ahead of this worker's step ",
                       expected, " on partition ", c.partition));
    }
    const int64_t chunk = c.samples == 0 ? 0 : c.offset / ctx_.chunk_elems;
    ASSIGN_OR_RETURN(const PushTracker::Arrival arrival,
                     p.tracker.Record(member, chunk, c.samples, c.largest));
    if (arrival == PushTracker::Arrival::kRepeat) return PushOutcome::kPartial;
    float* staged = a.staging.data() + member * p.meta.size;
    if (c.samples > 0) {
      DecodeChunk(c, std::min(ctx_.chunk_elems, p.meta.size - c.offset),
                  staged + c.offset);
    }
    if (!p.tracker.Complete(member)) return PushOutcome::kPartial;
    if (c.samples > 0) {
      // The member's whole gradient is here: apply it now, weighted so that
      // one step of every member moves as far as one synchronous step.
      const float scale = static_cast<float>(c.samples) /
                          static_cast<float>(ctx_.batch_size *
                                             ctx_.clocks->ActiveMembers());
      // Out of place, so that an update that would make a value
      // non-finite is dropped whole (the buffers swap when it is not).
      // Buffers: the latest member's statistics (no average on arrival).
      const bool finite =
          ApplyUpdate(ctx_.optimizer, c.step, p.updates, staged,
                      p.params.data(), p.state.data(), a.next_params.data(),
                      a.next_state.data(), p.meta.size, scale) &
          SetBuffers(p.buffers, staged, 1.0f, a.next_params.data());
      if (!finite) return Refuse(p, member, c);
      ++p.updates;
      p.params.swap(a.next_params);
      p.state.swap(a.next_state);
      ++p.version;
      if (p.tracks_ledger) p.ledger.Add(c.range);
    }
    p.tracker.ClearMember(member);
    ++a.member_step[member];
    p.Changed();
    return PushOutcome::kCompleted;
  }

  void ResetStep(PartitionState& p, int members) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    PartitionState::Arrivals& a = p.arrivals;
    a.staging.assign(members * p.meta.size, 0.0f);
    a.member_step.resize(members, a.member_step.empty() ? 0 : a.member_step[0]);
    p.tracker.Reset(members, p.num_chunks);
  }

  void Restored(PartitionState& p) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    p.stop = false;
    ResetStep(p, p.tracker.members());
  }

  absl::Status CheckAlign(const PartitionState&, int64_t) const override {
    return absl::OkStatus();  // clocks, not versions, are aligned
  }

  void Align(PartitionState& p, int64_t to, int members) const override
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    p.arrivals.member_step.assign(members, to);
  }

 private:
  // The member's gradient would make a value non-finite: not applied, its
  // step dropped (it may not push it again), the push refused.
  absl::Status Refuse(PartitionState& p, int member, const PushChunk& c) const
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    PartitionState::Rejected& r = p.rejected;
    ++r.count;
    r.step = c.step;
    r.member = member;
    r.largest = p.tracker.Largest(member);
    r.held = false;
    p.tracker.ClearMember(member);
    return RefusedUpdateError(
        absl::StrCat("push.data of step ", c.step,
                     ": applying this worker's gradient would make partition ",
                     c.partition, " non-finite (largest element at least ",
                     r.largest, "); not applied"),
        c.step);
  }

  const Context ctx_;
};

}  // namespace

std::unique_ptr<Aggregator> NewArrivalAggregator(Aggregator::Context context) {
  return std::make_unique<ArrivalAggregator>(std::move(context));
}

}  // namespace fulcrum
