// One worker's membership in one job, without a network of its own: it
// joins a generation (the channel opens and the parameters arrive), pushes
// gradient partitions, waits for parameters, leases data chunks, reports
// progress, re-joins when the generation ends, and leaves. It reaches the
// shards through a ParameterChannel (common/dataplane) made by a
// ChannelFactory and the coordinator through a JobLink (job_link.h); it
// holds no gRPC type. The C++ Trainer drives it; the C API for other
// trainers (PyTorch) wraps it.
//
// Thread safety: one thread (the training thread) calls everything except
// Leaving(), which any thread may call.
#ifndef FULCRUM_WORKER_WORKER_SESSION_H_
#define FULCRUM_WORKER_WORKER_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/dataplane/parameter_channel.h"
#include "common/tensor/layout.h"
#include "worker/job_link.h"

namespace fulcrum {

// A chunk lease: samples [next, end) of chunk `chunk` in epoch `epoch`'s
// order.
struct ChunkLease {
  int64_t chunk = -1;
  int64_t epoch = 0;
  int64_t next = 0;
  int64_t end = 0;
};

class WorkerSession {
 public:
  struct Options {
    std::string worker_id;
    // Longest wait for one step's parameters.
    absl::Duration step_timeout = absl::Minutes(5);
    // After the generation ended, how long to wait for the next one.
    absl::Duration rejoin_timeout = absl::Seconds(60);
    // Broken connections are re-opened within this long.
    absl::Duration reconnect_timeout = absl::Seconds(30);
    // Called each time a broken connection re-opens; may be null.
    std::function<void()> on_reconnect;
    // Called with each stretch of time LeaseChunk waited for a coordinator
    // that did not answer; may be null.
    std::function<void(absl::Duration)> on_coordinator_wait;
    // The longest sleep between lease attempts while it does not answer.
    absl::Duration lease_backoff_max = absl::Seconds(1);
  };

  // A session of the job in `first` (the worker's first assignment).
  // `layout`, `params` (where parameters arrive: layout->total_size() floats
  // of host memory) and `channels` are not owned and must outlive the
  // session; `link` too, and may be null (no coordinator: no chunk leases
  // and no re-joining).
  WorkerSession(Options options, Assignment first,
                const ParameterLayout* layout, float* params,
                ChannelFactory* channels, JobLink* link);
  ~WorkerSession();

  // Joins the generation of assignment(): opens the channel and waits until
  // every partition's parameters have arrived. Returns the step to compute
  // next. A member named to initialize (assignment().initialize) first
  // uploads what the parameter buffer holds as the job's values.
  absl::StatusOr<int64_t> Join();
  const Assignment& assignment() const { return assignment_; }
  // How a channel reaches the shards of assignment()'s generation as this
  // member (other channels of the generation: embedding rows).
  ChannelOptions ChannelOptionsNow() const;
  // How this job's gradients travel (wire.gradients).
  WireEncoding gradient_encoding() const { return gradients_; }

  // After the joined generation ended (`why`: ABORTED, or UNAVAILABLE when a
  // shard stayed unreachable), closes its channel and waits for the next
  // generation's assignment, which assignment() then is (Join it). Returns
  // `why` (annotated) when it is not such an end, none comes, there is no
  // link or the worker is leaving (CANCELLED).
  absl::Status NextGeneration(const absl::Status& why);

  // Sends partition `id`'s gradient for `step` (see ParameterChannel::Push).
  void Push(int32_t id, int64_t step, int64_t samples, const float* grads,
            bool stop, PushRange range = {});
  // Waits (step_timeout) until every partition arrived for reading at
  // `clock`; `arrived(id)` sees each partition as it arrives.
  absl::Status WaitForParameters(int64_t clock, bool* stop,
                                 absl::FunctionRef<void(int32_t)> arrived);

  // Reports the chunks finished since the last call and leases the next
  // one (besides the `in_flight` ones: handed out whole, not yet trained;
  // see LeaseChunkRequest.in_flight). nullopt: nothing to lease now (others still train the last chunks;
  // ask again later), or *exhausted: every chunk of every epoch is done.
  // ABORTED: the generation ended. FAILED_PRECONDITION without a link.
  // While the coordinator does not answer (UNAVAILABLE, DEADLINE_EXCEEDED)
  // it waits - never an empty step for want of an answer - asking again
  // with backoff up to lease_backoff_max, logging every 10 s, until it
  // answers or the worker leaves (CANCELLED).
  absl::StatusOr<std::optional<ChunkLease>> LeaseChunk(
      const std::vector<int64_t>& done, int64_t dataset_size,
      bool* exhausted, const std::vector<int64_t>& in_flight = {});

  void Report(const v1::Progress& progress);
  // The worker is leaving (shutdown, or the job was cancelled). Any thread.
  bool Leaving() const;
  // Ends the generation's channel: cancels first when leaving. Returns the
  // channel's first error.
  absl::Status Close();

 private:
  // link_->LeaseChunk until the coordinator answers (see LeaseChunk).
  absl::StatusOr<v1::LeaseChunkResponse> AwaitLease(
      const v1::LeaseChunkRequest& request);
  const Options options_;
  const ParameterLayout* const layout_;  // Not owned.
  float* const params_;                  // Not owned.
  ChannelFactory* const channels_;       // Not owned.
  JobLink* const link_;                  // Not owned; may be null.
  Assignment assignment_;
  const WireEncoding gradients_;
  // How gradients go on the wire (wire.gradients, wire.topk/randomk): the
  // generations' channels borrow it, so the sparse residual outlives them.
  const std::unique_ptr<GradientEncoder> encoder_;
  std::unique_ptr<ParameterChannel> channel_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKER_SESSION_H_
