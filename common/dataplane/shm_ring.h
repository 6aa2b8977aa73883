// A single-producer, single-consumer ring of protobuf messages in shared
// memory, with futex wake-ups: how a data-plane stream whose worker and
// shard share a host carries its messages once both sides mapped its
// segment (the gRPC stream then carries only hello and its end). A message
// costs a copy of its few bytes and, only when the other side sleeps, one
// FUTEX_WAKE - instead of HTTP/2 framing, a loopback TCP write and an epoll
// wake-up on each side.
//
// Layout at `base` (64-aligned, Bytes(capacity) long, zeroed = empty):
// the producer's cache line (head, closed, its futex word and whether it
// waits for room), the consumer's (tail, its futex word and whether it
// waits for data), then `capacity` bytes of records: a 4-byte length, the
// message, padding to 8. head and tail count bytes since the start.
//
// The peer is another process: everything read from the ring is checked
// (a length or position that cannot be is INVALID_ARGUMENT, never a read
// outside the ring). Every wait is bounded by a deadline and polls `stop`
// at least every kPoll, so a peer that died (which the caller learns from
// elsewhere: the gRPC stream) never leaves anyone waiting.
//
// Thread safety: one producer thread and one consumer thread at a time;
// Wake and Close may be called from any thread.
#ifndef FULCRUM_COMMON_DATAPLANE_SHM_RING_H_
#define FULCRUM_COMMON_DATAPLANE_SHM_RING_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/dataplane/shm_segment.h"
#include "google/protobuf/message_lite.h"

namespace fulcrum {

class ShmRing {
 public:
  static constexpr int64_t kHeaderBytes = 128;
  // The longest a wait sleeps before it checks `stop` and the deadline.
  static constexpr absl::Duration kPoll = absl::Milliseconds(50);

  // The bytes a ring with `capacity` bytes of records takes (capacity is
  // rounded up to a multiple of 64).
  static int64_t Bytes(int64_t capacity);

  // A view of the ring at `base` (not owned; `bytes` as from Bytes(),
  // at least Bytes(64)). The memory starts zeroed (an empty ring).
  ShmRing(char* base, int64_t bytes);

  // ---- Producer.
  // Appends `message`, waiting for room until `deadline` or until stop()
  // says so (CANCELLED; DEADLINE_EXCEEDED). INVALID_ARGUMENT when it is
  // larger than the ring could ever hold; FAILED_PRECONDITION once closed.
  absl::Status Write(const google::protobuf::MessageLite& message,
                     absl::Time deadline, absl::FunctionRef<bool()> stop);
  // No more messages: the consumer reads what is there, then the end.
  void Close();

  // ---- Consumer.
  // The next message into *message: true. false: the producer closed the
  // ring and every message was read. Waits until `deadline` or stop()
  // (DEADLINE_EXCEEDED; CANCELLED) while the ring is empty and open.
  // INVALID_ARGUMENT: the ring holds something no producer of ours wrote
  // (a bad length or position, bytes that do not parse).
  absl::StatusOr<bool> Read(google::protobuf::MessageLite* message,
                            absl::Time deadline,
                            absl::FunctionRef<bool()> stop);
  // Whether a message is waiting (without reading it).
  bool HasMessage() const;
  // A consumer of several rings (the worker's waiting thread owes
  // partitions of several shards): waits until one of `rings` has a
  // message or was closed and returns its index (a Read of it then does
  // not wait); CANCELLED once stop(), DEADLINE_EXCEEDED at the deadline.
  // UNIMPLEMENTED when this kernel cannot sleep on several futexes at once
  // (FutexWaitAny) or for more than kMaxWaitAny rings: the caller waits on
  // one. The caller is the consumer of each ring for the call.
  static absl::StatusOr<int> AwaitAny(absl::Span<ShmRing* const> rings,
                                      absl::Time deadline,
                                      absl::FunctionRef<bool()> stop);

  // Wakes a consumer waiting in Read so that it checks `stop` now (another
  // thread learned that the peer is gone).
  void Wake();

  int64_t capacity() const { return capacity_; }

 private:
  struct Header;
  Header* header() const;
  // Waits until ready() (sequentially consistent loads), sleeping on `seq`
  // with `waits` raised; CANCELLED once stop(), DEADLINE_EXCEEDED saying
  // `too_late` at the deadline. Both sides' waits.
  static absl::Status Await(std::atomic<uint32_t>& seq,
                            std::atomic<uint32_t>& waits,
                            absl::FunctionRef<bool()> ready,
                            absl::Time deadline,
                            absl::FunctionRef<bool()> stop,
                            const char* too_late);
  void CopyIn(uint64_t at, const char* from, int64_t n);
  void CopyOut(uint64_t at, char* to, int64_t n) const;

  char* const base_;
  const int64_t capacity_;
  std::string scratch_;  // the consumer's: one message's bytes
  std::string encoded_;  // the producer's
};

// The two rings of a stream's segment (ShmOffer.ring_bytes each, at the
// start of its gradient region): requests (worker to shard), then
// responses. The gradient slots follow them.
struct StreamRings {
  static constexpr int64_t kDefaultBytes = ShmRing::kHeaderBytes + (64 << 10);
  static constexpr int64_t kMinBytes = ShmRing::kHeaderBytes + 1024;
  static constexpr int64_t kMaxBytes = int64_t{16} << 20;
  // The rings of `segment` (not owned; it must outlive them).
  // INVALID_ARGUMENT naming hello.shm.ring_bytes unless it is a multiple
  // of 64 in [kMinBytes, kMaxBytes] and both rings fit the gradient region.
  static absl::StatusOr<StreamRings> In(const ShmSegment& segment,
                                        int64_t ring_bytes);
  ShmRing requests;
  ShmRing responses;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_SHM_RING_H_
