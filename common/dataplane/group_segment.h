// The shared memory of a host group (wire.pre_reduce): the members of one
// generation on one host hand their gradients to the group's leader, which
// sums them, pushes the sum for all (Hello.group, Push.shares) and hands
// the new parameters back - BytePS's local reduction, here through one
// ShmSegment per group and generation.
//
// The leader Create()s it (tag and nonce derived from the assignment's
// group_nonce, mode 0600, the leader's pid in the name so that SweepStale
// removes it after a SIGKILL); members Join() it (same uid, mode and
// nonce as ShmSegment::Attach checks) by claiming their slot, until the
// leader closes admission (CloseAdmission, which also unlinks the name):
// a member that finds no segment or a closed slot pushes for itself.
//
// Layout (the gradient region of the ShmSegment): a control block, a slot
// per member (state, pid), a push record per member and partition (step,
// samples, range, stop: written by the member, then `pushed` with release
// order), a record per partition (the clock its parameters are at), then
// each member's gradient but the leader's (layout total floats). The parameter region holds
// the parameters. Which bytes may be written when follows from the step
// protocol (group_channel.h); two futex words wake the other side (one for
// pushes, one for parameters): FUTEX_WAIT with a timeout, so that every
// wait also checks deadlines, cancellation and the peers' pids.
//
// Thread safety: the records are atomics; the gradient and parameter bytes
// are the protocol's to order.
#ifndef FULCRUM_COMMON_DATAPLANE_GROUP_SEGMENT_H_
#define FULCRUM_COMMON_DATAPLANE_GROUP_SEGMENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/dataplane/shm_segment.h"

namespace fulcrum {

// What a member pushed for one partition (its record).
struct GroupPush {
  int64_t samples = 0;
  int64_t chunk = -1, begin = 0, end = 0;  // the range behind it
  bool stop = false;
};

class GroupSegment {
 public:
  // Leader: a segment for `members` (leader included, >= 2) of a model of
  // `total` floats in `partitions` partitions.
  static absl::StatusOr<std::unique_ptr<GroupSegment>> Create(
      const std::string& group_nonce, int members, int partitions,
      int64_t total);
  // Member `slot` (1 .. members - 1): maps the group's segment and claims
  // the slot. NOT_FOUND: no segment yet (retry); FAILED_PRECONDITION: the
  // leader closed admission (push alone); PERMISSION_DENIED /
  // INVALID_ARGUMENT: not the group's (ShmSegment::Attach's checks, or a
  // size that does not match the model).
  static absl::StatusOr<std::unique_ptr<GroupSegment>> Join(
      const std::string& group_nonce, int slot, int members, int partitions,
      int64_t total);

  // Leader: ends admission and unlinks the name; whether each slot joined
  // (slot 0, the leader's, true).
  std::vector<bool> CloseAdmission();
  int joined() const;  // members that claimed their slot so far

  // ---- Member side.
  float* grads(int slot) const;  // slot >= 1: total floats
  // Publishes the slot's push of `partition` for `step` (its gradient is in
  // grads(slot) already) and wakes the leader.
  void Publish(int slot, int32_t partition, int64_t step, const GroupPush& p);
  // The clock `partition`'s parameters are at (-1: none yet).
  int64_t ParamsClock(int32_t partition) const;
  // The step Open answered (-1 until the leader opened); *stop after Done.
  int64_t opened() const;
  // The newest clock the leader finished (WaitForClock returned) and
  // whether a worker asked to stop there.
  int64_t done(bool* stop) const;

  // ---- Leader side.
  // Whether `slot` published `partition` for `step`, and what.
  bool Pushed(int slot, int32_t partition, int64_t step, GroupPush* p) const;
  float* params() const;
  void PublishParams(int32_t partition, int64_t clock);
  void SetOpened(int64_t clock);
  void SetDone(int64_t clock, bool stop);

  // ---- Both.
  // The leader failed or left: members end their waits with this code.
  void Fail(int code);
  int failed() const;
  // The leader failed member `slot` alone (its gradient was not finite,
  // or held the largest element of a refused update): the member ends its
  // waits with `code` and `message` (at most 255 bytes kept).
  void FailSlot(int slot, int code, const std::string& message);
  int slot_failed(int slot, std::string* message) const;
  // A member left (its channel closed): the leader stops waiting for it.
  void Leave(int slot);
  bool left(int slot) const;
  int32_t pid(int slot) const;  // of the slot's process (0: none yet)

  // Futex words: read one, check the condition, then Wait with the value
  // read (returns at once if it moved since). Wait is bounded by `max`.
  uint32_t pushes_seq() const;
  uint32_t params_seq() const;
  void WaitPushes(uint32_t seen, absl::Duration max) const;
  void WaitParams(uint32_t seen, absl::Duration max) const;

  int members() const { return members_; }

 private:
  struct Control;
  struct Slot;
  struct PushRecord;
  struct ParamsRecord;

  GroupSegment(std::unique_ptr<ShmSegment> shm, int members, int partitions,
               int64_t total);
  static int64_t GradBytes(int members, int partitions, int64_t total);

  Control* control() const;
  Slot* slot(int i) const;
  PushRecord* record(int slot, int32_t partition) const;
  ParamsRecord* params_record(int32_t partition) const;

  std::unique_ptr<ShmSegment> shm_;
  const int members_;
  const int partitions_;
  const int64_t total_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_GROUP_SEGMENT_H_
