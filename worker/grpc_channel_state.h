// GrpcParameterChannel's per-shard state (private to worker/grpc_channel*.cc):
// a Stream per shard holding partitions, a Connection per attempt at its
// gRPC stream, and whether the connection's payloads go through its
// shared-memory segment. The channel's files: grpc_channel.cc (connecting,
// re-opening, closing), grpc_channel_send.cc (the sender thread),
// grpc_channel_receive.cc (checking and decoding what arrives).
#ifndef FULCRUM_WORKER_GRPC_CHANNEL_STATE_H_
#define FULCRUM_WORKER_GRPC_CHANNEL_STATE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/dataplane/shm_ring.h"
#include "common/dataplane/shm_segment.h"
#include "worker/grpc_channel.h"

namespace fulcrum {

// Whether a connection's payloads go through its shared-memory segment.
enum class ShmState {
  kNone,     // none offered (TCP)
  kPending,  // offered; the shard's first Params will say
  kMapped,   // the shard mapped it: pushes go through it (and messages
             // through its rings when on_rings)
  kRefused,  // the shard said no (or the connection ended first): TCP
};

// One attempt at the stream to a shard.
struct GrpcParameterChannel::Connection {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<RequestFrame, ResponseFrame>> rw;
  // Offered in the hello; released once refused. A new connection offers
  // a new segment, so a slot is never rewritten while a shard's handler of
  // an older connection may still read it.
  std::unique_ptr<ShmSegment> shm;
  ShmState shm_state = ShmState::kNone;  // guarded by the stream's mu
  // The segment's message rings (offered with it; empty when shm is), and
  // where the gradient slots start in its gradient region (after them).
  std::optional<StreamRings> rings;
  int64_t slot_base = 0;
  // The shard took the rings (its first message said so; set before
  // shm_state leaves kPending): every later message goes through them.
  // Guarded by the stream's mu.
  bool on_rings = false;
  // On rings the thread waiting for parameters (WaitForClock, Open) reads
  // the response ring itself (ReadRings) while waiter_reads; the receiver
  // reads the gRPC stream, which now carries only its end, then clears
  // waiter_reads, wakes the ring, waits until ring_busy is false and reads
  // what is left in the ring itself before Finish. grpc_ended: the gRPC
  // stream ended (the ring's reads and writes stop waiting).
  std::atomic<bool> waiter_reads{false};
  bool ring_busy = false;  // a ring Read in progress; guarded by stream's mu
  std::atomic<bool> grpc_ended{false};
};

struct GrpcParameterChannel::Stream {
  int shard = 0;
  std::vector<int32_t> partitions;
  // Shared memory: where each partition's gradient goes in a segment's
  // gradient region (bytes from its start; by partition id, -1: another
  // stream's), and the region's size (4 bytes an element, each side).
  std::vector<int64_t> grad_slot;
  int64_t region_bytes = 0;
  // Receiver thread only (set while shm_state is kPending, before any
  // ring message).
  bool shm_warned = false;
  // The waiting thread's message, reused (ReadRings).
  v1::StreamResponse waiter_message;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::internal::RpcMethod> method;  // Stream, with frames
  std::thread sender, receiver;
  absl::Mutex mu;
  std::vector<QueuedPush> queue ABSL_GUARDED_BY(mu);  // reserved up front
  // A thread is writing pushes (the sender, or a pusher on rings): it owns
  // `frame` until it clears this.
  bool writing ABSL_GUARDED_BY(mu) = false;
  RequestFrame frame;
  // Pushes of the current step already written: sent again on a new
  // connection. Cleared when the step's parameters arrived.
  std::vector<QueuedPush> sent ABSL_GUARDED_BY(mu);
  // The connection being opened or in use (for Cancel), and the one the
  // sender writes to (set once hello is written: one writer at a time).
  std::shared_ptr<Connection> attempt ABSL_GUARDED_BY(mu);
  std::shared_ptr<Connection> conn ABSL_GUARDED_BY(mu);
  bool closing ABSL_GUARDED_BY(mu) = false;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  // The sender has left (after its half-close of the connection it saw):
  // a connection opened later is half-closed by the receiver itself, or its
  // Read would wait for a shard that waits for pushes.
  bool sender_done ABSL_GUARDED_BY(mu) = false;
  bool receiver_done ABSL_GUARDED_BY(mu) = false;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_GRPC_CHANNEL_STATE_H_
