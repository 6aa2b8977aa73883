#include "common/dataplane/shm_ring.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dataplane/futex.h"

namespace fulcrum {
namespace {

constexpr int64_t kAlign = 64;
constexpr int64_t kLengthBytes = 4;
constexpr int64_t kRecordAlign = 8;

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// A record's bytes in the ring: its length, the message, padding.
int64_t RecordBytes(int64_t message_bytes) {
  return RoundUp(kLengthBytes + message_bytes, kRecordAlign);
}

}  // namespace

struct ShmRing::Header {
  // Written by the producer.
  alignas(64) std::atomic<uint64_t> head;
  std::atomic<uint32_t> closed;
  std::atomic<uint32_t> data_seq;        // futex: bumped to wake the consumer
  std::atomic<uint32_t> consumer_waits;  // the consumer may be asleep
  // Written by the consumer.
  alignas(64) std::atomic<uint64_t> tail;
  std::atomic<uint32_t> room_seq;        // futex: bumped to wake the producer
  std::atomic<uint32_t> producer_waits;  // the producer may be asleep
};

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free);

int64_t ShmRing::Bytes(int64_t capacity) {
  return kHeaderBytes + RoundUp(std::max<int64_t>(capacity, kAlign), kAlign);
}

ShmRing::ShmRing(char* base, int64_t bytes)
    : base_(base),
      capacity_(std::max<int64_t>(bytes - kHeaderBytes, 0) / kAlign * kAlign) {}

ShmRing::Header* ShmRing::header() const {
  static_assert(sizeof(Header) <= kHeaderBytes);
  return reinterpret_cast<Header*>(base_);
}

void ShmRing::CopyIn(uint64_t at, const char* from, int64_t n) {
  char* data = base_ + kHeaderBytes;
  const int64_t i = static_cast<int64_t>(at % capacity_);
  const int64_t first = std::min(n, capacity_ - i);
  std::memcpy(data + i, from, first);
  std::memcpy(data, from + first, n - first);
}

void ShmRing::CopyOut(uint64_t at, char* to, int64_t n) const {
  const char* data = base_ + kHeaderBytes;
  const int64_t i = static_cast<int64_t>(at % capacity_);
  const int64_t first = std::min(n, capacity_ - i);
  std::memcpy(to, data + i, first);
  std::memcpy(to + first, data, n - first);
}

absl::Status ShmRing::Await(std::atomic<uint32_t>& seq,
                            std::atomic<uint32_t>& waits,
                            absl::FunctionRef<bool()> ready,
                            absl::Time deadline,
                            absl::FunctionRef<bool()> stop,
                            const char* too_late) {
  for (;;) {
    const uint32_t seen = seq.load(std::memory_order_acquire);
    if (ready()) return absl::OkStatus();
    if (stop()) return absl::CancelledError("the stream ended");
    const absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError(too_late);
    // Dekker with the other side's publish: either ready() sees what it
    // published or it sees `waits` and wakes us (seq then moved past seen).
    waits.store(1, std::memory_order_seq_cst);
    if (!ready()) FutexWait(&seq, seen, std::min(kPoll, deadline - now));
    waits.store(0, std::memory_order_relaxed);
  }
}

absl::Status ShmRing::Write(const google::protobuf::MessageLite& message,
                            absl::Time deadline,
                            absl::FunctionRef<bool()> stop) {
  Header* h = header();
  if (h->closed.load(std::memory_order_relaxed) != 0)
    return absl::FailedPreconditionError("the ring is closed");
  encoded_.clear();
  if (!message.AppendToString(&encoded_))
    return absl::InvalidArgumentError("a message that does not serialize");
  const int64_t need = RecordBytes(static_cast<int64_t>(encoded_.size()));
  if (need > capacity_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a message of ", encoded_.size(), " bytes does not fit a ring of ",
        capacity_));
  }
  const uint64_t head = h->head.load(std::memory_order_relaxed);
  const absl::Status room = Await(
      h->room_seq, h->producer_waits,
      [&] {
        // A tail past head or too far behind: the consumer's memory is not
        // ours to trust; the ring counts as full until the deadline.
        const uint64_t tail = h->tail.load(std::memory_order_seq_cst);
        return tail <= head &&
               static_cast<int64_t>(head - tail) + need <= capacity_;
      },
      deadline, stop,
      "the peer did not make room in the shared-memory ring in time");
  if (!room.ok()) return room;
  const uint32_t length = static_cast<uint32_t>(encoded_.size());
  CopyIn(head, reinterpret_cast<const char*>(&length), kLengthBytes);
  CopyIn(head + kLengthBytes, encoded_.data(),
         static_cast<int64_t>(encoded_.size()));
  h->head.store(head + need, std::memory_order_release);
  // Dekker with Read: either it sees the new head or we see it waiting.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->consumer_waits.load(std::memory_order_relaxed) != 0)
    FutexWake(&h->data_seq);
  return absl::OkStatus();
}

void ShmRing::Close() {
  header()->closed.store(1, std::memory_order_release);
  FutexWake(&header()->data_seq);
}

void ShmRing::Wake() { FutexWake(&header()->data_seq); }

bool ShmRing::HasMessage() const {
  const Header* h = header();
  return h->head.load(std::memory_order_acquire) !=
         h->tail.load(std::memory_order_relaxed);
}

absl::StatusOr<int> ShmRing::AwaitAny(absl::Span<ShmRing* const> rings,
                                      absl::Time deadline,
                                      absl::FunctionRef<bool()> stop) {
  const size_t n = rings.size();
  if (n == 0 || n > static_cast<size_t>(kMaxWaitAny))
    return absl::UnimplementedError("AwaitAny takes 1 to 16 rings");
  const std::atomic<uint32_t>* words[kMaxWaitAny];
  uint32_t seen[kMaxWaitAny];
  auto ready = [&]() -> int {
    for (size_t i = 0; i < n; ++i) {
      const Header* h = rings[i]->header();
      if (h->head.load(std::memory_order_seq_cst) !=
              h->tail.load(std::memory_order_relaxed) ||
          h->closed.load(std::memory_order_seq_cst) != 0) {
        return static_cast<int>(i);
      }
    }
    return -1;
  };
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      words[i] = &rings[i]->header()->data_seq;
      seen[i] = words[i]->load(std::memory_order_acquire);
    }
    if (const int i = ready(); i >= 0) return i;
    if (stop()) return absl::CancelledError("the stream ended");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          "no message in the shared-memory rings in time");
    }
    // Dekker with each producer's publish, as Await.
    for (size_t i = 0; i < n; ++i)
      rings[i]->header()->consumer_waits.store(1, std::memory_order_seq_cst);
    bool waited = true;
    if (ready() < 0) {
      waited = FutexWaitAny(absl::MakeConstSpan(words, n),
                            absl::MakeConstSpan(seen, n),
                            std::min(kPoll, deadline - now));
    }
    for (size_t i = 0; i < n; ++i)
      rings[i]->header()->consumer_waits.store(0, std::memory_order_relaxed);
    if (!waited)
      return absl::UnimplementedError("this kernel has no futex_waitv");
  }
}

absl::StatusOr<bool> ShmRing::Read(google::protobuf::MessageLite* message,
                                   absl::Time deadline,
                                   absl::FunctionRef<bool()> stop) {
  Header* h = header();
  const uint64_t tail = h->tail.load(std::memory_order_relaxed);
  const absl::Status data = Await(
      h->data_seq, h->consumer_waits,
      [&] {
        return h->head.load(std::memory_order_seq_cst) != tail ||
               h->closed.load(std::memory_order_seq_cst) != 0;
      },
      deadline, stop, "no message in the shared-memory ring in time");
  if (!data.ok()) return data;
  // Closed: what was published before the close is read first.
  const uint64_t head = h->head.load(std::memory_order_acquire);
  if (head == tail) return false;
  const uint64_t used = head - tail;
  if (head < tail || used > static_cast<uint64_t>(capacity_) ||
      used < static_cast<uint64_t>(kLengthBytes) || tail % kRecordAlign != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shared-memory ring's head ", head, " is not within ", capacity_,
        " bytes after its tail ", tail));
  }
  uint32_t length = 0;
  CopyOut(tail, reinterpret_cast<char*>(&length), kLengthBytes);
  const int64_t record = RecordBytes(length);
  if (record > static_cast<int64_t>(used)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a record in the shared-memory ring claims ", length,
        " bytes; the ring holds ", used));
  }
  scratch_.resize(length);
  CopyOut(tail + kLengthBytes, scratch_.data(), length);
  h->tail.store(tail + record, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->producer_waits.load(std::memory_order_relaxed) != 0)
    FutexWake(&h->room_seq);
  if (!message->ParseFromString(scratch_)) {
    return absl::InvalidArgumentError(
        "a message in the shared-memory ring does not parse");
  }
  return true;
}

absl::StatusOr<StreamRings> StreamRings::In(const ShmSegment& segment,
                                             int64_t ring_bytes) {
  if (ring_bytes % kAlign != 0 || ring_bytes < kMinBytes ||
      ring_bytes > kMaxBytes || 2 * ring_bytes > segment.grad_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hello.shm.ring_bytes is ", ring_bytes, "; it must be a multiple of ",
        kAlign, " in [", kMinBytes, ", ", kMaxBytes, "] with room for two in "
        "the segment's gradient region of ", segment.grad_bytes(), " bytes"));
  }
  char* base = segment.at(segment.grad_offset());
  return StreamRings{ShmRing(base, ring_bytes),
                     ShmRing(base + ring_bytes, ring_bytes)};
}

}  // namespace fulcrum
