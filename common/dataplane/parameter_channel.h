// The worker's side of the data plane as an interface: a connection to the
// shards of one job generation that pushes gradient partitions and delivers
// new parameters partition by partition. Transports plug in here, as gloo's
// transport sits behind transport/device.h:
//   GrpcParameterChannel (worker/grpc_channel.h)   one gRPC stream per shard;
//   LocalParameterChannel (server/ps/local_channel.h, tests)  calls the
//       shard core in process.
// How a chunk is encoded (bf16, top-k) is the GradientEncoder's
// (gradient_encoder.h), which every transport calls; the shared-memory
// transport is next.
//
// Errors are absl::Status with the contract of docs/errors.md: ABORTED (the
// generation ended: re-join), UNAVAILABLE (a shard stayed unreachable past
// reconnect_timeout), CANCELLED (Cancel()), DEADLINE_EXCEEDED.
//
// Thread safety: Open, Push, WaitForClock and Close are called from one
// thread (the training thread); Cancel from any thread.
#ifndef FULCRUM_COMMON_DATAPLANE_PARAMETER_CHANNEL_H_
#define FULCRUM_COMMON_DATAPLANE_PARAMETER_CHANNEL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/dataplane/gradient_encoder.h"
#include "common/dataplane/payload.h"
#include "common/dataplane/row_channel.h"
#include "common/tensor/layout.h"

namespace fulcrum {

// The samples behind a pushed gradient (chunk sharding; chunk < 0: none).
struct PushRange {
  int64_t chunk = -1, begin = 0, end = 0;
};

// One member's part of a pre-reduced push (ParameterChannel::PushShares).
struct MemberShare {
  int64_t samples = 0;
  PushRange range;
};

// A push as a channel queues it: ParameterChannel::Push's arguments.
struct QueuedPush {
  int32_t id;
  int64_t step;
  int64_t samples;
  const float* grads;
  bool stop;
  PushRange range;
  // Pre-reduced: one per member (not owned; see PushShares). Empty: none.
  absl::Span<const MemberShare> shares = {};
};

// A worker of the generation on this host (Assignment.host_group).
struct GroupPeer {
  std::string worker_id;
  // By shard index (only in the group leader's assignment).
  std::vector<std::string> shard_credentials;
};

// The chunks a push of partition `p` travels in: calls `send(offset, count)`
// for each run of at most `chunk_elems` elements in order, or once with
// (0, 0) for an empty push (samples = 0); stops at the first `send` that
// returns false. Returns whether every call did.
inline bool ForEachChunk(const Partition& p, int64_t samples,
                         int64_t chunk_elems,
                         absl::FunctionRef<bool(int64_t, int64_t)> send) {
  const int64_t size = samples == 0 ? 0 : p.size;
  int64_t offset = 0;
  do {
    const int64_t n = std::min(chunk_elems, size - offset);
    if (!send(offset, n)) return false;
    offset += n;
  } while (offset < size);
  return true;
}

struct ChannelOptions {
  std::string job_id;
  std::string worker_id;
  int64_t generation = 1;
  std::vector<std::string> shard_addresses;  // by shard index
  // By shard index, what the hello carries to prove the worker is
  // worker_id (WorkerAssignment.shard_credentials); may be empty.
  std::vector<std::string> shard_credentials;
  int64_t chunk_bytes = 1 << 20;  // pushes travel in chunks of chunk_bytes / 4 elements
  // How gradients travel (the job's wire.gradients); the transport
  // encodes them. Parameters arrive in whatever encoding the shard sends.
  WireEncoding gradients = WireEncoding::kFp32;
  // The worker's encoder (wire.gradients and wire.topk; it keeps the
  // top-k residual across generations), not owned; null: the channel
  // encodes dense chunks in `gradients` with one of its own.
  GradientEncoder* encoder = nullptr;
  absl::Duration connect_timeout = absl::Seconds(30);
  // Payloads to a shard on this host go through a shared-memory segment
  // (the stream keeps the control); TCP when off, when the shard is
  // elsewhere or when it refuses the segment.
  bool shared_memory = true;
  // wire.pre_reduce: this generation's members on this host, the group's
  // leader first (Assignment.host_group); empty: no group. What
  // MakeGroupChannel (worker/group_channel.h) reads; transports ignore it.
  std::vector<GroupPeer> host_group;
  std::string group_nonce;
  // How long a group's leader waits for its members to join, and a member
  // for its leader's segment, before each goes on without the other.
  absl::Duration group_join_window = absl::Seconds(10);
  // Set by the group leader on the channel it pushes through: the other
  // members whose gradients its pushes carry (the hello names them, with
  // their credentials); pushes then go through PushShares.
  std::vector<GroupPeer> pushes_for;
  // How long a broken connection is retried before the channel fails.
  absl::Duration reconnect_timeout = absl::Seconds(30);
  // Called (from a channel thread) each time a broken connection re-opens.
  std::function<void()> on_reconnect;
};

// The encoder a channel sends through: options.encoder, or (when there is
// none) a dense one in options.gradients that the channel owns in *own.
// Called from a member initializer, `own` must be a member declared before
// the one that keeps the result (it is constructed first, then assigned).
inline GradientEncoder* ChannelEncoder(const ChannelOptions& options,
                                       const ParameterLayout* layout,
                                       std::unique_ptr<GradientEncoder>* own) {
  if (options.encoder != nullptr) return options.encoder;
  *own = std::make_unique<GradientEncoder>(
      layout, GradientEncoder::Options{.chunk_elems = options.chunk_bytes / 4,
                                       .encoding = options.gradients});
  return own->get();
}

class ParameterChannel {
 public:
  virtual ~ParameterChannel() = default;

  // Uploads `values` (layout->total_size() floats, the whole model) as the
  // job's initial values (an external model, whose first values come from
  // the member the coordinator names). OK too when the shards hold values
  // already (another member was first). Before Open.
  virtual absl::Status Initialize(const float* values) = 0;

  // Connects to every shard holding partitions and waits until every
  // partition's current values have arrived in the parameter buffer.
  // Returns their clock: the step to compute next.
  virtual absl::StatusOr<int64_t> Open() = 0;

  // Queues the push of partition `id`'s gradient, read from `grads` (the
  // flat gradient, which must stay unchanged until the next WaitForClock
  // returns) for `step`. samples = 0 sends an empty push (no data this
  // step). A step's pushes are re-sent by the channel itself after a
  // reconnect; the shard applies nothing twice.
  virtual void Push(int32_t id, int64_t step, int64_t samples,
                    const float* grads, bool stop, PushRange range) = 0;
  // A pre-reduced push (a channel opened with options.pushes_for): grads
  // the samples-weighted mean of the members' gradients, samples their
  // sum, `shares` one per member (this worker first, then pushes_for's
  // order; not copied: valid until the next WaitForClock returns).
  virtual void PushShares(int32_t id, int64_t step, int64_t samples,
                          const float* grads, bool stop,
                          absl::Span<const MemberShare> shares) = 0;

  // Waits until every partition has arrived for reading at `clock` (the
  // parameters to compute step `clock` with; in sync mode exactly version
  // `clock`), calling `arrived(id)` on the calling thread for each
  // partition as soon as it has arrived (each once), so that the caller can
  // move it on (e.g. to a GPU) while the rest is in flight. *stop is set
  // when a worker asked everyone to stop.
  virtual absl::Status WaitForClock(
      int64_t clock, absl::Time deadline, bool* stop,
      absl::FunctionRef<void(int32_t)> arrived) = 0;

  // Makes waits return CANCELLED (the worker leaves). Any thread.
  virtual void Cancel() = 0;
  // Ends the connections and returns the first error the channel saw.
  virtual absl::Status Close() = 0;
};

// Makes channels: the transport a WorkerSession uses.
class ChannelFactory {
 public:
  virtual ~ChannelFactory() = default;
  // `layout` and `params` (layout->total_size() floats of host memory,
  // where parameters arrive) are not owned and must outlive the channel.
  virtual std::unique_ptr<ParameterChannel> Create(
      ChannelOptions options, const ParameterLayout* layout,
      float* params) = 0;
  // A channel for embedding rows (row_channel.h) to the same shards as
  // member options.worker_id of generation options.generation;
  // UNIMPLEMENTED where this transport has none.
  virtual absl::StatusOr<std::unique_ptr<RowChannel>> CreateRows(
      const ChannelOptions& options) {
    return absl::UnimplementedError("this transport carries no embedding rows");
  }
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_PARAMETER_CHANNEL_H_
