#include "common/dataplane/group_segment.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dataplane/futex.h"

namespace fulcrum {

struct alignas(64) GroupSegment::Control {
  std::atomic<uint32_t> pushes_seq;  // futex: a member published a push
  std::atomic<uint32_t> params_seq;  // futex: the leader published params
  std::atomic<uint32_t> admission;   // 0 open, 1 closed
  std::atomic<int32_t> failed;       // an absl::StatusCode; 0: none
  std::atomic<int64_t> opened;       // the step Open answered; -1 before
  std::atomic<int64_t> done;         // the newest clock finished; -1
  std::atomic<int32_t> done_stop;
};

struct alignas(64) GroupSegment::Slot {
  std::atomic<uint32_t> state;  // kEmpty, kJoined, kShut, kLeft
  std::atomic<int32_t> pid;
  std::atomic<int32_t> failed;  // the leader failed this member: a code
  char message[256];            // written before `failed`
};

struct alignas(64) GroupSegment::PushRecord {
  std::atomic<int64_t> pushed;  // step + 1 of the newest publication
  int64_t samples, chunk, begin, end;
  int32_t stop;
};

struct alignas(64) GroupSegment::ParamsRecord {
  std::atomic<int64_t> clock;
};

namespace {

enum SlotState : uint32_t { kEmpty = 0, kJoined = 1, kShut = 2, kLeft = 3 };

static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<int64_t>::is_always_lock_free,
              "the records are shared between processes");

uint64_t Fnv(const std::string& bytes, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string Tag(const std::string& group_nonce) {
  return absl::StrCat(absl::Hex(Fnv(group_nonce, 1), absl::kZeroPad16));
}

std::string Nonce(const std::string& group_nonce) {
  const uint64_t a = Fnv(group_nonce, 2), b = Fnv(group_nonce, 3);
  std::string out(ShmSegment::kNonceBytes, '\0');
  std::memcpy(out.data(), &a, 8);
  std::memcpy(out.data() + 8, &b, 8);
  return out;
}

int64_t Align(int64_t n) { return (n + 63) / 64 * 64; }

}  // namespace

int64_t GroupSegment::GradBytes(int members, int partitions, int64_t total) {
  return Align(sizeof(Control)) + members * Align(sizeof(Slot)) +
         int64_t{members} * partitions * Align(sizeof(PushRecord)) +
         partitions * Align(sizeof(ParamsRecord)) +
         int64_t{members - 1} * Align(total * 4);  // the leader's is its own
}

GroupSegment::GroupSegment(std::unique_ptr<ShmSegment> shm, int members,
                           int partitions, int64_t total)
    : shm_(std::move(shm)),
      members_(members),
      partitions_(partitions),
      total_(total) {}

absl::StatusOr<std::unique_ptr<GroupSegment>> GroupSegment::Create(
    const std::string& group_nonce, int members, int partitions,
    int64_t total) {
  if (members < 2 || partitions < 1 || total < 1)
    return absl::InvalidArgumentError("a host group needs two members");
  absl::StatusOr<std::unique_ptr<ShmSegment>> shm = ShmSegment::CreateTagged(
      GradBytes(members, partitions, total), total * 4, Tag(group_nonce),
      Nonce(group_nonce));
  if (!shm.ok()) return shm.status();
  std::unique_ptr<GroupSegment> g(
      new GroupSegment(std::move(*shm), members, partitions, total));
  // The pages are zero: every atomic starts at 0; set the others.
  Control* c = g->control();
  c->opened.store(-1);
  c->done.store(-1);
  for (int32_t p = 0; p < partitions; ++p) g->params_record(p)->clock.store(-1);
  g->slot(0)->pid.store(getpid());
  g->slot(0)->state.store(kJoined, std::memory_order_release);
  return g;
}

absl::StatusOr<std::unique_ptr<GroupSegment>> GroupSegment::Join(
    const std::string& group_nonce, int slot, int members, int partitions,
    int64_t total) {
  if (slot < 1 || slot >= members)
    return absl::InvalidArgumentError(absl::StrCat("no group slot ", slot));
  absl::StatusOr<std::string> name = ShmSegment::FindTagged(Tag(group_nonce));
  if (!name.ok()) return name.status();
  absl::StatusOr<std::unique_ptr<ShmSegment>> shm =
      ShmSegment::Attach(*name, Nonce(group_nonce), /*unlink=*/false);
  if (!shm.ok()) return shm.status();
  if ((*shm)->grad_bytes() < GradBytes(members, partitions, total) ||
      (*shm)->params_bytes() < total * 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(*name, " is too small for this group's model"));
  }
  std::unique_ptr<GroupSegment> g(
      new GroupSegment(std::move(*shm), members, partitions, total));
  Slot* s = g->slot(slot);
  s->pid.store(getpid());
  uint32_t expected = kEmpty;
  if (!s->state.compare_exchange_strong(expected, kJoined,
                                        std::memory_order_acq_rel)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group slot ", slot, " is not open (the leader closed admission)"));
  }
  FutexWake(&g->control()->pushes_seq);
  return g;
}

std::vector<bool> GroupSegment::CloseAdmission() {
  control()->admission.store(1);
  std::vector<bool> joined(members_, false);
  joined[0] = true;
  for (int i = 1; i < members_; ++i) {
    uint32_t expected = kEmpty;
    joined[i] = !slot(i)->state.compare_exchange_strong(
                    expected, kShut, std::memory_order_acq_rel) &&
                expected == kJoined;
  }
  shm_->Unlink();
  return joined;
}

int GroupSegment::joined() const {
  int n = 0;
  for (int i = 0; i < members_; ++i)
    n += slot(i)->state.load(std::memory_order_acquire) == kJoined ? 1 : 0;
  return n;
}

GroupSegment::Control* GroupSegment::control() const {
  return reinterpret_cast<Control*>(shm_->at(shm_->grad_offset()));
}

GroupSegment::Slot* GroupSegment::slot(int i) const {
  return reinterpret_cast<Slot*>(shm_->at(shm_->grad_offset()) +
                                 Align(sizeof(Control)) +
                                 i * Align(sizeof(Slot)));
}

GroupSegment::PushRecord* GroupSegment::record(int slot,
                                               int32_t partition) const {
  const int64_t at = Align(sizeof(Control)) + members_ * Align(sizeof(Slot)) +
                     (int64_t{slot} * partitions_ + partition) *
                         Align(sizeof(PushRecord));
  return reinterpret_cast<PushRecord*>(shm_->at(shm_->grad_offset()) + at);
}

GroupSegment::ParamsRecord* GroupSegment::params_record(
    int32_t partition) const {
  const int64_t at = Align(sizeof(Control)) + members_ * Align(sizeof(Slot)) +
                     int64_t{members_} * partitions_ * Align(sizeof(PushRecord)) +
                     partition * Align(sizeof(ParamsRecord));
  return reinterpret_cast<ParamsRecord*>(shm_->at(shm_->grad_offset()) + at);
}

float* GroupSegment::grads(int s) const {
  const int64_t at = Align(sizeof(Control)) + members_ * Align(sizeof(Slot)) +
                     int64_t{members_} * partitions_ * Align(sizeof(PushRecord)) +
                     partitions_ * Align(sizeof(ParamsRecord)) +
                     (s - 1) * Align(total_ * 4);
  return reinterpret_cast<float*>(shm_->at(shm_->grad_offset()) + at);
}

float* GroupSegment::params() const {
  return reinterpret_cast<float*>(shm_->at(shm_->params_offset()));
}

void GroupSegment::Publish(int s, int32_t partition, int64_t step,
                           const GroupPush& p) {
  PushRecord* r = record(s, partition);
  r->samples = p.samples;
  r->chunk = p.chunk;
  r->begin = p.begin;
  r->end = p.end;
  r->stop = p.stop ? 1 : 0;
  r->pushed.store(step + 1, std::memory_order_release);
  FutexWake(&control()->pushes_seq);
}

bool GroupSegment::Pushed(int s, int32_t partition, int64_t step,
                          GroupPush* p) const {
  const PushRecord* r = record(s, partition);
  if (r->pushed.load(std::memory_order_acquire) != step + 1) return false;
  *p = GroupPush{r->samples, r->chunk, r->begin, r->end, r->stop != 0};
  return true;
}

int64_t GroupSegment::ParamsClock(int32_t partition) const {
  return params_record(partition)->clock.load(std::memory_order_acquire);
}

void GroupSegment::PublishParams(int32_t partition, int64_t clock) {
  params_record(partition)->clock.store(clock, std::memory_order_release);
  FutexWake(&control()->params_seq);
}

int64_t GroupSegment::opened() const {
  return control()->opened.load(std::memory_order_acquire);
}

void GroupSegment::SetOpened(int64_t clock) {
  control()->opened.store(clock, std::memory_order_release);
  FutexWake(&control()->params_seq);
}

int64_t GroupSegment::done(bool* stop) const {
  const int64_t clock = control()->done.load(std::memory_order_acquire);
  *stop = control()->done_stop.load(std::memory_order_acquire) != 0;
  return clock;
}

void GroupSegment::SetDone(int64_t clock, bool stop) {
  control()->done_stop.store(stop ? 1 : 0, std::memory_order_release);
  control()->done.store(clock, std::memory_order_release);
  FutexWake(&control()->params_seq);
}

void GroupSegment::Fail(int code) {
  int expected = 0;
  control()->failed.compare_exchange_strong(expected, code);
  FutexWake(&control()->params_seq);
  FutexWake(&control()->pushes_seq);
}

void GroupSegment::FailSlot(int s, int code, const std::string& message) {
  Slot* slot_ = slot(s);
  const size_t n = std::min(message.size(), sizeof(slot_->message) - 1);
  std::memcpy(slot_->message, message.data(), n);
  slot_->message[n] = '\0';
  slot_->failed.store(code, std::memory_order_release);
  FutexWake(&control()->params_seq);
}

int GroupSegment::slot_failed(int s, std::string* message) const {
  const Slot* slot_ = slot(s);
  const int code = slot_->failed.load(std::memory_order_acquire);
  if (code != 0 && message != nullptr) *message = slot_->message;
  return code;
}

int GroupSegment::failed() const {
  return control()->failed.load(std::memory_order_acquire);
}

void GroupSegment::Leave(int s) {
  slot(s)->state.store(kLeft, std::memory_order_release);
  FutexWake(&control()->pushes_seq);
}

bool GroupSegment::left(int s) const {
  return slot(s)->state.load(std::memory_order_acquire) == kLeft;
}

int32_t GroupSegment::pid(int s) const { return slot(s)->pid.load(); }

uint32_t GroupSegment::pushes_seq() const {
  return control()->pushes_seq.load(std::memory_order_acquire);
}

uint32_t GroupSegment::params_seq() const {
  return control()->params_seq.load(std::memory_order_acquire);
}

void GroupSegment::WaitPushes(uint32_t seen, absl::Duration max) const {
  FutexWait(&control()->pushes_seq, seen, max);
}

void GroupSegment::WaitParams(uint32_t seen, absl::Duration max) const {
  FutexWait(&control()->params_seq, seen, max);
}

}  // namespace fulcrum
