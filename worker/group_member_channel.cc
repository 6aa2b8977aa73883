// A host group's member other than the leader (group_channel.h): its
// gradients and parameters through the group's segment.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/group_channel_base.h"

namespace fulcrum {
namespace {

// Any other member: its pushes and parameters go through the segment.
class MemberChannel : public GroupChannelBase {
 public:
  MemberChannel(ChannelOptions options, const ParameterLayout* layout,
                float* params, ChannelFactory* factory, int slot)
      : GroupChannelBase(std::move(options), layout, params, factory),
        slot_(slot) {}

  absl::StatusOr<int64_t> Open() override {
    const int n = static_cast<int>(options_.host_group.size());
    const absl::Time until = absl::Now() + options_.group_join_window;
    absl::StatusOr<std::unique_ptr<GroupSegment>> g;
    for (;;) {
      g = GroupSegment::Join(options_.group_nonce, slot_, n,
                             static_cast<int>(layout_->partitions().size()),
                             layout_->total_size());
      // Not there yet, or caught between the leader's create and its
      // header (too small, no nonce yet): try again within the window. A
      // closed admission is final.
      if (g.ok() || absl::IsFailedPrecondition(g.status()) ||
          cancelled_.load() || absl::Now() >= until)
        break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (!g.ok()) {
      std::cerr << "fulcrum-worker: " << options_.worker_id
                << ": not in the host group (" << g.status()
                << "); pushing for itself\n";
      SetInner(factory_->Create(Solo(), layout_, params_));
      return inner_->Open();
    }
    segment_ = std::move(*g);
    const absl::Time deadline =
        absl::Now() + options_.group_join_window + options_.connect_timeout;
    for (;;) {
      const uint32_t seen = segment_->params_seq();
      const int64_t opened = segment_->opened();
      if (opened >= 0) {
        std::memcpy(params_, segment_->params(), layout_->total_size() * 4);
        return opened;
      }
      RETURN_IF_ERROR(CheckLeader(deadline, "the leader's first parameters"));
      segment_->WaitParams(seen, std::min(kGroupPoll, deadline - absl::Now()));
    }
  }

  void Push(int32_t id, int64_t step, int64_t samples, const float* grads,
            bool stop, PushRange range) override {
    if (segment_ == nullptr) {
      inner_->Push(id, step, samples, grads, stop, range);
      return;
    }
    if (samples > 0) {
      std::memcpy(Part(segment_->grads(slot_), id), grads + layout_->partitions()[id].offset,
                  PartBytes(id));
    }
    segment_->Publish(slot_, id, step,
                      {samples, range.chunk, range.begin, range.end, stop});
  }

  absl::Status WaitForClock(int64_t clock, absl::Time deadline, bool* stop,
                            absl::FunctionRef<void(int32_t)> arrived) override {
    if (segment_ == nullptr)
      return inner_->WaitForClock(clock, deadline, stop, arrived);
    RETURN_IF_ERROR(error_);
    std::vector<uint8_t>& got = got_;  // sized once: no allocation a step
    got.assign(layout_->partitions().size(), 0);
    size_t remaining = got.size();
    for (;;) {
      const uint32_t seen = segment_->params_seq();
      for (const Partition& p : layout_->partitions()) {
        if (got[p.id] || segment_->ParamsClock(p.id) < clock) continue;
        std::memcpy(Part(params_, p.id), Part(segment_->params(), p.id),
                    PartBytes(p.id));
        got[p.id] = 1;
        --remaining;
        arrived(p.id);
      }
      if (remaining == 0 && segment_->done(stop) >= clock)
        return absl::OkStatus();
      RETURN_IF_ERROR(CheckLeader(
          deadline, absl::StrCat("the parameters of step ", clock)));
      segment_->WaitParams(seen, std::min(kGroupPoll, deadline - absl::Now()));
    }
  }

  absl::Status Close() override {
    if (segment_ != nullptr) segment_->Leave(slot_);
    return inner_ != nullptr ? inner_->Close() : error_;
  }

 private:
  // A failure of this member's own (its slot) keeps its code; the
  // leader's ends the member's channel too, but the member only re-joins
  // (UNAVAILABLE; ABORTED when the generation ended).
  absl::Status CheckLeader(absl::Time deadline, absl::string_view what) const {
    std::string message;
    if (const int code = segment_->slot_failed(slot_, &message); code != 0)
      return absl::Status(static_cast<absl::StatusCode>(code), message);
    if (const int code = segment_->failed(); code != 0) {
      const auto leader = static_cast<absl::StatusCode>(code);
      return absl::Status(
          leader == absl::StatusCode::kAborted ? leader
                                               : absl::StatusCode::kUnavailable,
          absl::StrCat("host group leader ", options_.host_group[0].worker_id,
                       " ended its channel (", absl::StatusCodeToString(leader),
                       ")"));
    }
    if (!ProcessAlive(segment_->pid(0))) {
      return absl::UnavailableError(absl::StrCat(
          "host group leader ", options_.host_group[0].worker_id, " died"));
    }
    return Check(deadline, what);
  }

  const int slot_;
  std::vector<uint8_t> got_;  // WaitForClock's: partitions arrived
};


}  // namespace

std::unique_ptr<ParameterChannel> NewGroupMember(ChannelOptions options,
                                                 const ParameterLayout* layout,
                                                 float* params,
                                                 ChannelFactory* factory,
                                                 int slot) {
  return std::make_unique<MemberChannel>(std::move(options), layout, params,
                                         factory, slot);
}

}  // namespace fulcrum
