// The ParameterServer.Stream messages without copying their payloads.
//
// On the wire these are exactly fulcrum.v1.StreamRequest and
// StreamResponse (any protobuf peer reads and writes them); in memory the
// tensor bytes (push.data, params.data) stay out of the protobuf message:
//   sending a push, the bytes are a gRPC slice that references the
//     sender's own buffer (the worker's gradient, or its encoded copy):
//     no copy before the kernel's;
//   receiving, the bytes stay in the slices the message arrived in and
//     `data` points into them: the shard reduces straight from them, the
//     worker decodes them straight into its parameter buffer;
//   sending parameters, the shard reads them once into a gRPC slice
//     (the snapshot any sender must take: the next update overwrites them).
// A message's more[] (several chunks at once: pushes, or parameters)
// carry their payloads the same way, one slice each (more_out /
// more_data). The rest of each message (a few dozen bytes a chunk) is
// parsed and serialized by protobuf. Before, a megabyte was copied twice on each side by
// protobuf alone (into the message, then into gRPC's buffer) and once more
// by the worker; see docs/benchmarks.md.
//
// Registered with gRPC through SerializationTraits (below), so a
// ClientReaderWriter<RequestFrame, ResponseFrame> and the server's
// ServerReaderWriter<ResponseFrame, RequestFrame> use them; the service
// and the worker's channel select these types for the Stream method.
//
// Thread safety: frames are values used by one thread at a time;
// SlicePins is thread-safe.
#ifndef FULCRUM_COMMON_DATAPLANE_GRPC_FRAMES_H_
#define FULCRUM_COMMON_DATAPLANE_GRPC_FRAMES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/impl/codegen/serialization_traits.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <grpcpp/support/status.h>

#include "absl/time/time.h"
#include "common/dataplane/payload.h"
#include "fulcrum/v1/parameter_server.pb.h"

namespace fulcrum {

// Counts the slices gRPC still holds that reference memory the caller
// owns, so that the owner can wait before it frees or reuses that memory
// for something else. Outlives every slice it made (shared ownership).
class SlicePins {
 public:
  SlicePins();
  ~SlicePins();
  SlicePins(const SlicePins&) = delete;
  SlicePins& operator=(const SlicePins&) = delete;

  // A slice of `bytes` at `data` (not copied) counted until gRPC drops it.
  grpc::Slice Pin(const char* data, size_t bytes);
  // Waits until no pinned slice is held; false at the deadline.
  bool WaitUntilReleased(absl::Time deadline);
  int64_t outstanding() const;

 struct State;  // shared with the slices' destroy callbacks

 private:
  std::shared_ptr<State> state_;
};

// A StreamRequest (hello or push). push.data is out of line: `out` when
// sending, `data` when received.
struct RequestFrame {
  v1::StreamRequest message;  // push.data left empty
  // Sending: push.data's bytes, referenced until gRPC lets go (pinned by
  // `pins` when set, else they must outlive the call).
  const char* out = nullptr;
  size_t out_bytes = 0;
  SlicePins* pins = nullptr;
  // Sending: more[i].data's bytes, as `out` (pinned by `pins` too): one
  // per message.more(i), or none at all (their payloads are in the
  // shared-memory segment, or they have none).
  struct Out {
    const char* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<Out> more_out;
  // Received: push.data in its wire encoding (push.encoding), pointing
  // into `slices`.
  Payload data;
  // Received: more[i].data, one per message.more(i) (empty where it has
  // none), in its encoding (more[i].encoding), pointing into `slices`.
  std::vector<Payload> more_data;
  std::vector<grpc::Slice> slices;
  // Received: why the bytes did not parse (the reader reports it; gRPC
  // would only end the stream).
  grpc::Status parse_error;
};

// A StreamResponse. params.data is out of line: `out` when sending (owned:
// fill it through Reserve), `data` when received.
struct ResponseFrame {
  v1::StreamResponse message;  // params.data left empty
  // Sending: room for `bytes` bytes of params.data, 4-aligned; returns
  // where to write them (a fresh gRPC slice each time: the previous one may
  // still be in flight). out_bytes may be lowered afterwards (narrowed in
  // place).
  char* Reserve(size_t bytes);
  char* out_data = nullptr;
  size_t out_bytes = 0;
  grpc::Slice out;            // holds out_data, unless it is `small`
  alignas(8) char small[32];  // gRPC inlines slices this small
  // The payload written so far (through Reserve) as a slice of its own,
  // to be held for a later message (more_out); out_bytes of it.
  grpc::Slice TakeOut() const;
  // Sending: more[i].data, one slice per message.more(i), or none at all
  // (their payloads are in the shared-memory segment).
  std::vector<grpc::Slice> more_out;
  // Received: params.data in its wire encoding (params.encoding).
  Payload data;
  // Received: more[i].data as RequestFrame's.
  std::vector<Payload> more_data;
  std::vector<grpc::Slice> slices;
  grpc::Status parse_error;  // as RequestFrame's
};

// The frames as bytes and back (what SerializationTraits calls; public for
// tests). Parse errors name the field and leave `frame` cleared. gRPC turns
// a failed deserialization into a silent end of stream, so the traits
// below keep the error in frame->parse_error and report success: the
// reader answers it with a status that says what was wrong.
grpc::Status SerializeFrame(const RequestFrame& frame, grpc::ByteBuffer* out);
grpc::Status SerializeFrame(const ResponseFrame& frame, grpc::ByteBuffer* out);
grpc::Status ParseFrame(grpc::ByteBuffer* in, RequestFrame* frame);
grpc::Status ParseFrame(grpc::ByteBuffer* in, ResponseFrame* frame);

// "/fulcrum.v1.ParameterServer/Stream"
const char* StreamMethodName();

}  // namespace fulcrum

namespace grpc {

template <>
class SerializationTraits<fulcrum::RequestFrame> {
 public:
  static Status Serialize(const fulcrum::RequestFrame& frame,
                          ByteBuffer* buffer, bool* own_buffer) {
    *own_buffer = true;
    return fulcrum::SerializeFrame(frame, buffer);
  }
  static Status Deserialize(ByteBuffer* buffer, fulcrum::RequestFrame* frame) {
    frame->parse_error = fulcrum::ParseFrame(buffer, frame);
    return Status::OK;
  }
};

template <>
class SerializationTraits<fulcrum::ResponseFrame> {
 public:
  static Status Serialize(const fulcrum::ResponseFrame& frame,
                          ByteBuffer* buffer, bool* own_buffer) {
    *own_buffer = true;
    return fulcrum::SerializeFrame(frame, buffer);
  }
  static Status Deserialize(ByteBuffer* buffer,
                            fulcrum::ResponseFrame* frame) {
    frame->parse_error = fulcrum::ParseFrame(buffer, frame);
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // FULCRUM_COMMON_DATAPLANE_GRPC_FRAMES_H_
