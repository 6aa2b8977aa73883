// What the host group's channels (group_channel.h) share, and their
// makers: private to worker/group_channel*.cc.
//
// Thread safety: as ParameterChannel's (Cancel from any thread; the rest
// from the training thread).
#ifndef FULCRUM_WORKER_GROUP_CHANNEL_BASE_H_
#define FULCRUM_WORKER_GROUP_CHANNEL_BASE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/dataplane/group_segment.h"
#include "common/dataplane/parameter_channel.h"

namespace fulcrum {

// Longest a wait sleeps before it looks at deadlines, cancellation and pids.
inline constexpr absl::Duration kGroupPoll = absl::Milliseconds(50);

// Whether process `pid` still runs: not gone, and not a zombie (a dead
// leader stays one until its parent reaps it - a launcher may not at once).
bool ProcessAlive(int32_t pid);

// What the leader's and the members' channels share: the transport's
// channel they may fall back to, cancellation, Initialize.
class GroupChannelBase : public ParameterChannel {
 public:
  GroupChannelBase(ChannelOptions options, const ParameterLayout* layout,
                   float* params, ChannelFactory* factory)
      : options_(std::move(options)),
        layout_(layout),
        params_(params),
        factory_(factory) {}

  // An upload goes over a channel of the worker's own.
  absl::Status Initialize(const float* values) override {
    return factory_->Create(Solo(), layout_, params_)->Initialize(values);
  }

  void PushShares(int32_t, int64_t, int64_t, const float*, bool,
                  absl::Span<const MemberShare>) override {
    error_ = absl::InternalError("host groups do not nest");
  }

  void Cancel() override {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    if (inner_ != nullptr) inner_->Cancel();
  }

 protected:
  // The options of a channel that pushes for this worker alone.
  ChannelOptions Solo() const {
    ChannelOptions o = options_;
    o.host_group.clear();
    o.pushes_for.clear();
    return o;
  }
  void SetInner(std::unique_ptr<ParameterChannel> inner) {
    absl::MutexLock lock(&mu_);
    inner_ = std::move(inner);
    if (cancelled_.load()) inner_->Cancel();
  }
  // The waits' common checks: OK to go on waiting.
  absl::Status Check(absl::Time deadline, absl::string_view waiting_for) const {
    if (cancelled_.load()) return absl::CancelledError("channel cancelled");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("host group: still waiting for ", waiting_for));
    }
    return absl::OkStatus();
  }
  float* Part(float* base, int32_t id) const {
    return base + layout_->partitions()[id].offset;
  }
  int64_t PartBytes(int32_t id) const {
    return layout_->partitions()[id].size * 4;
  }

  const ChannelOptions options_;
  const ParameterLayout* const layout_;
  float* const params_;
  ChannelFactory* const factory_;
  std::atomic<bool> cancelled_{false};
  absl::Status error_;
  std::unique_ptr<GroupSegment> segment_;
  // Set once (Open); then used by the training thread only, and by Cancel.
  absl::Mutex mu_;
  std::unique_ptr<ParameterChannel> inner_;
};


// The group's leader (slot 0) and its other members (group_leader_channel.cc,
// group_member_channel.cc).
std::unique_ptr<ParameterChannel> NewGroupLeader(ChannelOptions options,
                                                 const ParameterLayout* layout,
                                                 float* params,
                                                 ChannelFactory* factory);
std::unique_ptr<ParameterChannel> NewGroupMember(ChannelOptions options,
                                                 const ParameterLayout* layout,
                                                 float* params,
                                                 ChannelFactory* factory,
                                                 int slot);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_GROUP_CHANNEL_BASE_H_
