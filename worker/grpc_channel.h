// The data plane over gRPC (a ParameterChannel): one bidirectional stream
// per shard for the life of a membership generation. A sender thread per
// stream pushes gradient partitions as backward produces them (so
// communication overlaps the rest of backward); a receiver thread per stream
// writes arriving parameters straight into the model's flat parameter
// buffer.
//
// Payloads leave and arrive without a copy of our own (grpc_frames.h): a
// push's slice references the gradient buffer (or, for bf16/fp16, the
// channel's encoded copy of it), pinned until gRPC lets go of it; arriving
// parameters are decoded straight from the message's slices into the
// parameter buffer.
//
// A stream that breaks (UNAVAILABLE: a dropped connection, a restarting
// shard; NOT_FOUND: a shard that has not got the job yet) is re-opened with
// bounded exponential backoff and jitter within `reconnect_timeout`: the
// shard answers the new hello with its current values, and the pushes of
// the current step are sent again (the shard acknowledges repeats without
// applying them twice). ABORTED (the generation ended) and other errors end
// the channel's waits.
//
// Shared memory (ChannelOptions::shared_memory, on by default): when the
// shard's address is on this host, each connection creates a segment
// (common/dataplane/shm_segment.h) with a slot for every partition's
// gradient and parameters and offers it in the hello. Once the shard's
// first Params says it mapped it, pushes are copied into their slot and the
// message carries only where (push.shm) - every push the sender takes from
// its queue at once in one message (StreamRequest.more); parameters arrive
// the same way (StreamResponse.more).
// Slots are reused without locks: the protocol orders them (a step's
// gradient is written after the previous step's parameters arrived, which
// the shard sends after it consumed the previous push). A shard that does
// not map it leaves the stream on TCP (logged once per stream).
//
// Close() half-closes every stream (a stream being re-opened included: the
// re-open gives up, or half-closes the new connection itself) and waits for
// the shard to end it, at most `connect_timeout`; then it cancels it.
//
// On rings a push is written by the thread that pushes, when nothing is
// queued or being written on its stream (one wake-up less per push), and
// parameters are read from the response ring by the thread that waits for
// them (WaitForClock, Open): no receiver hop. The receiver then only
// watches the gRPC stream for its end, and reads what is left in the ring
// once it ended. A stream on TCP (or a mixed set) wakes the waiter through
// its receiver as before; a waiter reading one stream's ring sees another
// stream's TCP arrivals once it has read the message it waits for.
//
// Thread safety: as ParameterChannel; the internal threads are owned here
// (started in Open, joined in Close or the destructor).
#ifndef FULCRUM_WORKER_GRPC_CHANNEL_H_
#define FULCRUM_WORKER_GRPC_CHANNEL_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "common/dataplane/arrivals.h"
#include "common/dataplane/grpc_frames.h"
#include "common/dataplane/parameter_channel.h"
#include "worker/grpc_row_channel.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"

namespace fulcrum {

class ShmRing;
class ShmSegment;

class GrpcParameterChannel : public ParameterChannel {
 public:
  // Test hook: called with each stream's context before each (re)connect.
  using ConfigureContext = std::function<void(grpc::ClientContext*)>;

  // `layout` and `params` are not owned and must outlive the channel.
  GrpcParameterChannel(ChannelOptions options, const ParameterLayout* layout,
                       float* params, ConfigureContext configure = nullptr);
  ~GrpcParameterChannel() override;

  absl::Status Initialize(const float* values) override;
  absl::StatusOr<int64_t> Open() override;
  void Push(int32_t id, int64_t step, int64_t samples, const float* grads,
            bool stop, PushRange range) override;
  void PushShares(int32_t id, int64_t step, int64_t samples,
                  const float* grads, bool stop,
                  absl::Span<const MemberShare> shares) override;
  absl::Status WaitForClock(int64_t clock, absl::Time deadline, bool* stop,
                            absl::FunctionRef<void(int32_t)> arrived) override;
  void Cancel() override;
  absl::Status Close() override;

 private:
  // Queues a push for its partition's stream, or writes it at once on rings
  // (Push and PushShares).
  void Enqueue(const QueuedPush& push);
  struct Stream;
  struct Connection;
  void SendLoop(Stream* s);
  // Where a connection's pushes go, read under the stream's lock once the
  // segment's fate is known (final from then on): its mapped segment (null:
  // payloads in the messages) and, on rings, its request ring (null: the
  // gRPC stream).
  struct Route {
    const ShmSegment* shm = nullptr;
    ShmRing* ring = nullptr;
  };
  static Route RouteOf(Connection& conn);
  // Writes `batch` to `conn` along `route` through the stream's frame (the
  // caller holds Stream::writing). false: a write failed (the receiver
  // re-opens the stream and re-queues `sent`).
  bool WriteBatch(Stream* s, Connection& conn, Route route,
                  absl::Span<const QueuedPush> batch);
  void ReceiveLoop(Stream* s);  // ReceiveConnections, then receiver_done
  void ReceiveConnections(Stream* s);
  // Reads one connection until it ends; false when the shard sent nonsense
  // (the channel failed).
  bool Receive(Stream* s, Connection& conn, bool* answered);
  // The shard's first message said `rings`: checks that this connection
  // offered them and switches it (false: nonsense, the channel failed).
  bool StartRings(Stream* s, Connection& conn);
  // On rings: hands the response ring to the waiting thread, reads the
  // gRPC stream until it ends, takes the ring back and reads what is left
  // in it; false as Receive.
  bool ReceiveRings(Stream* s, Connection& conn, bool* answered);
  // One message read from a response ring: checked and applied (false:
  // nonsense, the channel failed).
  bool ApplyRingMessage(Stream* s, Connection& conn,
                        const v1::StreamResponse& message);
  // The waiting thread's Arrivals::Pump: reads one message from the
  // response ring of a stream that owes a partition of `clock` (waiting
  // for it until `deadline`), or returns false when no such stream is on
  // rings.
  bool ReadRings(int64_t clock, absl::Time deadline);
  // The response rings ReadRings may read for `clock`, each marked
  // ring_busy (one with a message waiting alone, if any); ReleaseRings
  // unmarks them.
  struct OwnedRing {
    Stream* stream;
    std::shared_ptr<Connection> conn;
  };
  using OwnedRings = absl::InlinedVector<OwnedRing, 8>;  // no allocation
  OwnedRings TakeRings(int64_t clock);
  static void ReleaseRings(const OwnedRings& owned);
  // One StreamResponse's params and more[] into the parameter buffer.
  bool ApplyMessage(Stream* s, Connection& conn,
                    const v1::StreamResponse& message,
                    const Payload& inline_data,
                    absl::Span<const Payload> more_data);
  // Opens a stream to the shard and sends hello. The connection's context
  // is registered before the call so that Cancel() can reach it. Null once
  // the channel is closing or cancelled.
  std::shared_ptr<Connection> Connect(Stream* s);
  // Creates the connection's segment and offers it in `hello` when the
  // shard is on this host (and shared memory is on).
  void OfferSharedMemory(Stream* s, Connection& conn, v1::Hello* hello);
  // Checks one Params (`inline_data`: its params.data, if any) and decodes
  // it into the parameter buffer. false: the shard sent nonsense (the
  // channel failed).
  bool Apply(Stream* s, Connection& conn, const v1::Params& p,
             const Payload& inline_data);
  // The Params' payload in the segment (params.shm) into *out; learns from
  // the connection's first Params whether the shard mapped it. false: the
  // shard sent nonsense (the channel failed).
  bool ShmPayload(Stream* s, Connection& conn, const v1::Params& p,
                  const Payload& inline_data, Payload* out);

  const ChannelOptions options_;
  const ConfigureContext configure_;
  const ParameterLayout* const layout_;  // Not owned.
  float* const params_;                  // Not owned.
  const int64_t chunk_elems_;
  Arrivals arrivals_;
  // How chunks go on the wire: options_.encoder, or own_encoder_ (dense,
  // in options_.gradients) when there is none.
  // own_encoder_ stays declared before encoder_ (ChannelEncoder fills it).
  std::unique_ptr<GradientEncoder> own_encoder_;
  GradientEncoder* const encoder_;
  // Slices gRPC holds into the gradients or the encoder's buffers: Close
  // waits for them.
  SlicePins pins_;
  std::vector<std::unique_ptr<Stream>> streams_;  // shards holding partitions
  std::vector<int> stream_of_partition_;
};

// False when $FULCRUM_SHARED_MEMORY is 0, false or off (how a PyTorch
// worker turns shared memory off); true otherwise.
bool SharedMemoryFromEnvironment();

// Makes GrpcParameterChannels (the worker process's transport).
class GrpcChannelFactory : public ChannelFactory {
 public:
  // shared_memory: false turns ChannelOptions::shared_memory off for every
  // channel made here (fulcrum-worker --shared_memory=false).
  explicit GrpcChannelFactory(bool shared_memory = true)
      : shared_memory_(shared_memory) {}
  std::unique_ptr<ParameterChannel> Create(ChannelOptions options,
                                           const ParameterLayout* layout,
                                           float* params) override {
    options.shared_memory = options.shared_memory && shared_memory_;
    return std::make_unique<GrpcParameterChannel>(std::move(options), layout,
                                                  params);
  }
  absl::StatusOr<std::unique_ptr<RowChannel>> CreateRows(
      const ChannelOptions& options) override {
    return std::unique_ptr<RowChannel>(new GrpcRowChannel(options));
  }

 private:
  const bool shared_memory_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_GRPC_CHANNEL_H_
