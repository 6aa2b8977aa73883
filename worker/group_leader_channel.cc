// The host group's leader (group_channel.h): the only streams to the
// shards, the summation, the parameters handed back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/dataplane/payload.h"
#include "common/status/payloads.h"
#include "common/status/status_macros.h"
#include "worker/group_channel_base.h"

namespace fulcrum {
namespace {

// The group's first member: the only streams to the shards.
class LeaderChannel : public GroupChannelBase {
 public:
  using GroupChannelBase::GroupChannelBase;

  absl::StatusOr<int64_t> Open() override {
    const int n = static_cast<int>(options_.host_group.size());
    absl::StatusOr<std::unique_ptr<GroupSegment>> g = GroupSegment::Create(
        options_.group_nonce, n,
        static_cast<int>(layout_->partitions().size()), layout_->total_size());
    ChannelOptions inner = Solo();
    if (g.ok()) {
      segment_ = std::move(*g);
      const absl::Time until = absl::Now() + options_.group_join_window;
      for (;;) {
        const uint32_t seen = segment_->pushes_seq();
        if (segment_->joined() == n || cancelled_.load() ||
            absl::Now() >= until)
          break;
        segment_->WaitPushes(seen, kGroupPoll);
      }
      const std::vector<bool> joined = segment_->CloseAdmission();
      for (int i = 1; i < n; ++i) {
        if (!joined[i]) continue;
        slots_.push_back(i);
        inner.pushes_for.push_back(options_.host_group[i]);
      }
    } else {
      std::cerr << "fulcrum-worker: " << options_.worker_id
                << ": no host-group segment (" << g.status()
                << "); every member pushes for itself\n";
    }
    if (slots_.size() + 1 < static_cast<size_t>(n) && segment_ != nullptr) {
      std::cerr << "fulcrum-worker: " << options_.worker_id << ": "
                << slots_.size() << " of " << n - 1
                << " host-group members joined; the others push for "
                   "themselves\n";
    }
    if (slots_.empty()) segment_.reset();
    SetInner(factory_->Create(std::move(inner), layout_, params_));
    absl::StatusOr<int64_t> clock = inner_->Open();
    if (segment_ == nullptr) return clock;
    if (!clock.ok()) {
      segment_->Fail(static_cast<int>(clock.status().code()));
      return clock;
    }
    std::memcpy(segment_->params(), params_, layout_->total_size() * 4);
    for (const Partition& p : layout_->partitions())
      segment_->PublishParams(p.id, *clock);
    segment_->SetOpened(*clock);
    reduced_.assign(layout_->total_size(), 0.0f);
    got_.assign(slots_.size(), GroupPush{});
    largest_.assign(slots_.size() + 1, 0);
    shares_.assign(layout_->partitions().size(),
                   std::vector<MemberShare>(slots_.size() + 1));
    return clock;
  }

  void Push(int32_t id, int64_t step, int64_t samples, const float* grads,
            bool stop, PushRange range) override {
    if (segment_ == nullptr) {
      inner_->Push(id, step, samples, grads, stop, range);
      return;
    }
    pending_.push_back({id, step, samples, grads, stop, range});
    if (error_.ok()) error_ = Flush(absl::InfiniteFuture(), /*block=*/false);
  }

  absl::Status WaitForClock(int64_t clock, absl::Time deadline, bool* stop,
                            absl::FunctionRef<void(int32_t)> arrived) override {
    if (segment_ == nullptr)
      return inner_->WaitForClock(clock, deadline, stop, arrived);
    absl::Status s = error_.ok() ? Flush(deadline, /*block=*/true) : error_;
    if (s.ok()) {
      s = inner_->WaitForClock(clock, deadline, stop, [&](int32_t id) {
        std::memcpy(Part(segment_->params(), id), Part(params_, id),
                    PartBytes(id));
        segment_->PublishParams(id, clock);
        arrived(id);
      });
    }
    if (s.ok()) {
      segment_->SetDone(clock, *stop);
    } else {
      s = Blame(std::move(s));
      segment_->Fail(static_cast<int>(s.code()));
    }
    return s;
  }

  absl::Status Close() override {
    if (segment_ != nullptr)
      segment_->Fail(static_cast<int>(absl::StatusCode::kUnavailable));
    absl::Status s = inner_ != nullptr ? inner_->Close() : absl::OkStatus();
    return s.ok() ? error_ : s;
  }

 private:
  // Sums and pushes the pending partitions, in their order, whose every
  // joined member has published its push; block: waits for them (until
  // `deadline`), else stops at the first that is not complete.
  absl::Status Flush(absl::Time deadline, bool block) {
    std::vector<GroupPush>& got = got_;  // sized at Open: no allocation here
    while (!pending_.empty()) {
      const QueuedPush& own = pending_.front();
      const uint32_t seen = segment_->pushes_seq();
      size_t k = 0;
      while (k < slots_.size() &&
             segment_->Pushed(slots_[k], own.id, own.step, &got[k]))
        ++k;
      if (k == slots_.size()) {
        RETURN_IF_ERROR(Reduce(own, got));
        pending_.pop_front();
        continue;
      }
      if (!block) return absl::OkStatus();
      const int slot = slots_[k];
      const std::string& who = options_.host_group[slot].worker_id;
      if (segment_->left(slot) || !ProcessAlive(segment_->pid(slot))) {
        return absl::UnavailableError(absl::StrCat(
            "host group: member ", who, " left or died before pushing step ",
            own.step));
      }
      RETURN_IF_ERROR(Check(deadline, absl::StrCat(who, "'s push of partition ",
                                                   own.id, " of step ",
                                                   own.step)));
      segment_->WaitPushes(seen, std::min(kGroupPoll, deadline - absl::Now()));
    }
    return absl::OkStatus();
  }

  // The samples-weighted mean of the group's gradients of one partition,
  // pushed with each member's share. A member's gradient that is not
  // finite fails that member (as the shard would fail its push) and the
  // group's step (UNAVAILABLE: the others re-join without it).
  absl::Status Reduce(const QueuedPush& own, const std::vector<GroupPush>& got) {
    const Partition& part = layout_->partitions()[own.id];
    if (own.step != largest_step_) {
      std::fill(largest_.begin(), largest_.end(), 0);
      largest_step_ = own.step;
    }
    if (own.samples > 0)
      largest_[0] = std::max(largest_[0], TopExponent(own.grads + part.offset, part.size));
    for (size_t k = 0; k < got.size(); ++k) {
      if (got[k].samples == 0) continue;
      const float* g = segment_->grads(slots_[k]) + part.offset;
      // One pass (the shard's own check, payload.h) finds both: a NaN or
      // an infinity, and the largest magnitude.
      const uint8_t top = TopExponent(g, part.size);
      if (top == 0xff) {
        int64_t bad = 0;
        while (std::isfinite(g[bad])) ++bad;
        const std::string& who = options_.host_group[slots_[k]].worker_id;
        segment_->FailSlot(
            slots_[k], static_cast<int>(absl::StatusCode::kInvalidArgument),
            absl::StrCat("push.data element ", bad, " of partition ", own.id,
                         " is not finite (", g[bad], ")"));
        return absl::UnavailableError(absl::StrCat(
            "host group: member ", who, "'s gradient of step ", own.step,
            " is not finite; the group re-joins without it"));
      }
      largest_[k + 1] = std::max(largest_[k + 1], top);
    }
    std::vector<MemberShare>& shares = shares_[own.id];
    shares[0] = {own.samples, own.range};
    int64_t total = own.samples;
    bool stop = own.stop;
    for (size_t k = 0; k < got.size(); ++k) {
      shares[k + 1] = {got[k].samples,
                       PushRange{got[k].chunk, got[k].begin, got[k].end}};
      total += got[k].samples;
      stop |= got[k].stop;
    }
    if (total == 0) {
      inner_->PushShares(own.id, own.step, 0, reduced_.data(), stop, shares);
      return absl::OkStatus();
    }
    float* out = reduced_.data() + part.offset;
    const float w0 = static_cast<float>(own.samples) / total;
    if (own.samples > 0) {
      const float* g = own.grads + part.offset;
      for (int64_t i = 0; i < part.size; ++i) out[i] = w0 * g[i];
    } else {
      std::fill(out, out + part.size, 0.0f);
    }
    for (size_t k = 0; k < got.size(); ++k) {
      if (got[k].samples == 0) continue;
      const float w = static_cast<float>(got[k].samples) / total;
      const float* g = segment_->grads(slots_[k]) + part.offset;
      for (int64_t i = 0; i < part.size; ++i) out[i] += w * g[i];
    }
    inner_->PushShares(own.id, own.step, total, reduced_.data(), stop, shares);
    return absl::OkStatus();
  }

  // The largest |element|'s exponent byte (0xff: not finite).
  static uint8_t TopExponent(const float* g, int64_t n) {
    return MaxExponentRun(WireEncoding::kFp32, reinterpret_cast<const char*>(g),
                          n);
  }

  // A refused update (the shard marks it kRefusedUpdatePayload) names the
  // group's stream; the member whose gradient of the step held the largest
  // element is the one to fail, as the shard fails a worker of its own.
  // The leader itself: the error is its own.
  absl::Status Blame(absl::Status s) {
    if (!s.GetPayload(kRefusedUpdatePayload).has_value() || largest_.empty())
      return s;
    const size_t culprit =
        std::max_element(largest_.begin(), largest_.end()) - largest_.begin();
    if (culprit == 0) return s;
    const int slot = slots_[culprit - 1];
    segment_->FailSlot(slot, static_cast<int>(s.code()), std::string(s.message()));
    return absl::UnavailableError(absl::StrCat(
        "host group: member ", options_.host_group[slot].worker_id,
        "'s push held the largest element of a refused update; the group "
        "re-joins without it"));
  }

  std::vector<int> slots_;  // the members that joined
  // Per member (leader first): the exponent of the largest |element|
  // pushed in step largest_step_ (within a factor 2, as the shard judges).
  std::vector<uint8_t> largest_;
  std::vector<GroupPush> got_;  // Flush's, one per joined member
  int64_t largest_step_ = -1;
  std::deque<QueuedPush> pending_;
  std::vector<float> reduced_;
  std::vector<std::vector<MemberShare>> shares_;  // by partition
};


}  // namespace

std::unique_ptr<ParameterChannel> NewGroupLeader(ChannelOptions options,
                                                 const ParameterLayout* layout,
                                                 float* params,
                                                 ChannelFactory* factory) {
  return std::make_unique<LeaderChannel>(std::move(options), layout, params,
                                         factory);
}

}  // namespace fulcrum
