// The data-plane stream's frames (grpc_frames.h) and the shard core's
// types, both ways: parameters out through a FrameParamsWriter (in the
// frame's own slice, or in the stream's shared-memory segment, batched),
// pushes in as PushChunks (FromPush, CheckMore). The gRPC service drives
// them; no training logic lives here.
//
// Thread safety: a FrameParamsWriter belongs to its stream's handler thread;
// the functions are pure.
#ifndef FULCRUM_SERVER_PS_STREAM_FRAMES_H_
#define FULCRUM_SERVER_PS_STREAM_FRAMES_H_

#include <grpcpp/support/sync_stream.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dataplane/grpc_frames.h"
#include "common/dataplane/shm_ring.h"
#include "common/dataplane/shm_segment.h"
#include "server/ps/worker_stream.h"

namespace fulcrum {

// Where a FrameParamsWriter's gRPC messages go: the synchronous stream's
// Write (StreamWriterSink), or the callback service's write queue
// (stream_reactor.h).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // Sends `frame`, or queues a copy of it (its payload slice referenced,
  // not copied): the writer reuses the frame for the next message. false:
  // the peer is gone.
  virtual bool Write(const ResponseFrame& frame) = 0;
};

class StreamWriterSink : public FrameSink {
 public:
  // Not owned.
  explicit StreamWriterSink(
      grpc::ServerReaderWriter<ResponseFrame, RequestFrame>* stream)
      : stream_(stream) {}
  bool Write(const ResponseFrame& frame) override {
    return stream_->Write(frame);
  }

 private:
  grpc::ServerReaderWriter<ResponseFrame, RequestFrame>* const stream_;
};

// Params frames written to the data-plane stream: the values are read once,
// into a fresh slice (narrowed in that copy when the job sends bf16), and
// leave from it - or, on a stream with a mapped segment, into the partition's
// slot of its parameter region, and the frame says where (params.shm).
// Sends marked `more` are held and go out in one message with the next
// (StreamResponse.more: one wake-up of the worker's reader), up to
// kMaxHeld of them and, over TCP, kMaxHeldBytes of payload - through the
// stream's response ring once the worker's rings are in use (UseRing).
class FrameParamsWriter : public ParamsWriter {
 public:
  // `sink`, `segment` (may be null: TCP) and `slots` (bytes from the
  // parameter region's start, by partition id) are not owned.
  FrameParamsWriter(FrameSink* sink, const ShmSegment* segment,
                    const std::vector<int64_t>* slots)
      : sink_(sink), segment_(segment), slots_(slots) {}
  // The stream's response ring (not owned; it must outlive the writer):
  // the first message still goes over gRPC, with `rings` set; every later
  // one through the ring, each waiting at most `wait` for room, or until
  // `cancelled()`.
  void UseRing(ShmRing* ring, absl::Duration wait,
               std::function<bool()> cancelled);
  // In `encoding`: the caller narrows straight into the slice or slot.
  ParamsRoom Reserve(int32_t partition, int64_t offset, int64_t count,
                     WireEncoding encoding) override;
  bool Send(const ParamsHeader& h) override;

 private:
  // frame_ out: over gRPC, or through the ring once switched to it.
  bool Deliver();

  FrameSink* const sink_;
  const ShmSegment* const segment_;
  const std::vector<int64_t>* const slots_;
  bool in_segment_ = false;  // Reserve's room is in the segment
  int64_t shm_at_ = 0;       // and at this offset, for Send
  // Params held for one message (ParamsHeader::more), with their payloads
  // (TCP; empty slices for the segment's).
  static constexpr int kMaxHeld = 64;
  // (A larger one gains nothing per message and delays the first values.)
  static constexpr int64_t kMaxHeldBytes = 1 << 20;
  // (held_[0, held_count_): the elements stay allocated for the next
  // message - the hot path allocates nothing per step.)
  std::vector<v1::Params> held_;
  size_t held_count_ = 0;
  std::vector<grpc::Slice> held_out_;
  int64_t held_bytes_ = 0;
  ResponseFrame frame_;
  ShmRing* ring_ = nullptr;
  bool on_ring_ = false;  // the message that says so went out
  absl::Duration ring_wait_;
  std::function<bool()> cancelled_;
};

// The wire's push (its data, if any, in `inline_data`) as the core's chunk;
// `push`, `inline_data` (and `segment`, when it carries push.shm) must
// outlive `out`. A push.shm outside the gradient region, on a stream
// without a mapped segment, or beside push.data is INVALID_ARGUMENT naming
// the field (`name`: "push", or "more[]") (the core checks the rest, as
// for push.data).
absl::Status FromPush(const v1::Push& push, const Payload& inline_data,
                      const ShmSegment* segment, PushChunk* out,
                      absl::string_view name = "push");

// The next request of a stream on rings, from its request ring, into *r:
// true; false at the worker's close of the ring, or once cancelled() (the
// call's cancellation: a dead worker's transport, the idle watchdog; polled
// at least every ShmRing::kPoll). A ring holding what no worker of ours
// wrote is INVALID_ARGUMENT naming the request ring.
absl::StatusOr<bool> ReadRingRequest(ShmRing& ring,
                                     absl::FunctionRef<bool()> cancelled,
                                     RequestFrame* r);

// A message's more[] pushes may be applied: each has its payload out of
// line (a gRPC frame's more_data) or in a mapped segment (more[].shm);
// INVALID_ARGUMENT naming more[] otherwise (a more[].shm without a
// segment, a ring message's more[].data). Checked before any push of the
// message is applied.
absl::Status CheckMore(const v1::StreamRequest& message,
                       const ShmSegment* segment);

// A request after the hello carries pushes (INVALID_ARGUMENT otherwise)
// and its more[] may be applied (CheckMore): checked before any of them.
// OK unless the stream's segment was shrunk under its mapping (what was
// read past its end was zeros, not a SIGBUS): INVALID_ARGUMENT, the stream
// ends. Called after each push was applied.
absl::Status CheckSegment(const ShmSegment* segment);
absl::Status CheckPushes(const v1::StreamRequest& message,
                         const ShmSegment* segment);
// The pushes a checked request carries: 1 + more_size(); push i as a
// chunk (0: push, its data the frame's; i > 0: more[i - 1], its data
// more_data[i - 1]), by FromPush.
inline int PushCount(const v1::StreamRequest& message) {
  return 1 + message.more_size();
}
absl::Status PushAt(const RequestFrame& request, int i,
                    const ShmSegment* segment, PushChunk* out);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_STREAM_FRAMES_H_
