#include "worker/worker_session.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/config/job_spec.h"
#include "common/hash/hash.h"
#include "common/net/retry.h"
#include "common/status/status_macros.h"
#include "worker/group_channel.h"

namespace fulcrum {
namespace {

// wire.randomk's seed: the job's seed and the worker's id (FNV-1a), so
// that workers draw different positions and one worker the same ones in
// every generation and on every transport.
uint64_t RandomKSeed(uint64_t job_seed, const std::string& worker_id) {
  return Fnv1a64(worker_id, kFnvOffsetBasis ^ job_seed);
}

// The job's wire: section as the encoder's options (validated at
// submission).
GradientEncoder::Options EncoderOptions(const v1::JobSpec& spec,
                                        WireEncoding gradients,
                                        const std::string& worker_id) {
  const v1::WireSpec& wire = spec.wire();
  GradientEncoder::Options o;
  o.chunk_elems = spec.chunk_bytes() / 4;
  o.encoding = gradients;
  o.fraction = SparseFraction(spec);
  o.warmup_steps = wire.topk_warmup_steps();
  if (MomentumOnWorkers(spec))
    o.momentum = static_cast<float>(spec.optimizer().momentum());
  o.selection = wire.randomk() > 0 ? GradientEncoder::Selection::kRandom
                                   : GradientEncoder::Selection::kTopK;
  o.seed = RandomKSeed(spec.seed(), worker_id);
  o.whole_below = SparseMinBytes(spec) / 4;
  return o;
}

}  // namespace

Assignment FromProto(const v1::WorkerAssignment& a) {
  Assignment out{a.job_id(),
                 a.spec(),
                 a.rank(),
                 a.world_size(),
                 a.generation(),
                 {a.shard_addresses().begin(), a.shard_addresses().end()},
                 a.initialize(),
                 {a.shard_credentials().begin(), a.shard_credentials().end()}};
  for (const v1::HostPeer& peer : a.host_group()) {
    out.host_group.push_back(
        {peer.worker_id(),
         {peer.shard_credentials().begin(), peer.shard_credentials().end()}});
  }
  out.group_nonce = a.group_nonce();
  return out;
}

WorkerSession::WorkerSession(Options options, Assignment first,
                             const ParameterLayout* layout, float* params,
                             ChannelFactory* channels, JobLink* link)
    : options_(std::move(options)),
      layout_(layout),
      params_(params),
      channels_(channels),
      link_(link),
      assignment_(std::move(first)),
      // Validated at submission (unset: fp32); the job's, every generation.
      gradients_(EncodingFromProto(assignment_.spec.wire().gradients(),
                                   "wire.gradients")
                     .value_or(WireEncoding::kFp32)),
      encoder_(std::make_unique<GradientEncoder>(
          layout, EncoderOptions(assignment_.spec, gradients_,
                                 options_.worker_id))) {}

WorkerSession::~WorkerSession() {
  if (channel_ != nullptr) {
    channel_->Cancel();
    channel_->Close().IgnoreError();
  }
}

ChannelOptions WorkerSession::ChannelOptionsNow() const {
  const Assignment& a = assignment_;
  ChannelOptions o;
  o.job_id = a.job_id;
  o.worker_id = options_.worker_id;
  o.generation = a.generation;
  o.shard_addresses = a.shard_addresses;
  o.shard_credentials = a.shard_credentials;
  o.chunk_bytes = a.spec.chunk_bytes();
  o.gradients = gradients_;
  o.encoder = encoder_.get();
  o.reconnect_timeout = options_.reconnect_timeout;
  o.on_reconnect = options_.on_reconnect;
  o.host_group = a.host_group;
  o.group_nonce = a.group_nonce;
  return o;
}

absl::StatusOr<int64_t> WorkerSession::Join() {
  if (channel_ != nullptr) Close().IgnoreError();
  const Assignment& assignment = assignment_;
  channel_ = MakeGroupChannel(ChannelOptionsNow(), layout_, params_, channels_);
  // Named to give the job its values: the caller's, in the buffer now.
  if (assignment.initialize) RETURN_IF_ERROR(channel_->Initialize(params_));
  absl::StatusOr<int64_t> first = channel_->Open();
  if (first.ok()) {
    std::cerr << "fulcrum-worker: " << assignment.job_id << " generation "
              << assignment.generation << ": rank " << assignment.rank
              << " of " << assignment.world_size << ", first step " << *first
              << "\n";
  }
  return first;
}

absl::Status WorkerSession::NextGeneration(const absl::Status& why) {
  // The generation ended: nothing of its channel is worth waiting for (a
  // shard may hold a read for the step timeout).
  if (channel_ != nullptr) channel_->Cancel();
  Close().IgnoreError();
  const bool ended = why.code() == absl::StatusCode::kAborted ||
                     why.code() == absl::StatusCode::kUnavailable;
  if (!ended || link_ == nullptr || link_->Leaving()) return why;
  std::optional<Assignment> next = link_->NextAssignment(
      assignment_.job_id, assignment_.generation,
      absl::Now() + options_.rejoin_timeout);
  if (!next.has_value()) {
    if (link_->Leaving()) return absl::CancelledError("job cancelled");
    return absl::Status(
        why.code(), absl::StrCat(why.message(), " (and no newer generation of ",
                                 assignment_.job_id, " came)"));
  }
  assignment_ = std::move(*next);
  return absl::OkStatus();
}

void WorkerSession::Push(int32_t id, int64_t step, int64_t samples,
                         const float* grads, bool stop, PushRange range) {
  channel_->Push(id, step, samples, grads, stop, range);
}

absl::Status WorkerSession::WaitForParameters(
    int64_t clock, bool* stop, absl::FunctionRef<void(int32_t)> arrived) {
  return channel_->WaitForClock(clock, absl::Now() + options_.step_timeout,
                                stop, arrived);
}

absl::StatusOr<std::optional<ChunkLease>> WorkerSession::LeaseChunk(
    const std::vector<int64_t>& done, int64_t dataset_size, bool* exhausted,
    const std::vector<int64_t>& in_flight) {
  if (link_ == nullptr) {
    return absl::FailedPreconditionError(
        "dataset.sharding 'chunks' needs a coordinator to lease chunks from; "
        "use 'static'");
  }
  v1::LeaseChunkRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_job_id(assignment_.job_id);
  request.set_generation(assignment_.generation);
  request.set_dataset_size(dataset_size);
  for (int64_t id : done) request.add_done(id);
  for (int64_t id : in_flight) request.add_in_flight(id);
  ASSIGN_OR_RETURN(const v1::LeaseChunkResponse got, AwaitLease(request));
  *exhausted = got.exhausted();
  if (!got.has_chunk()) return std::optional<ChunkLease>();
  return std::optional<ChunkLease>(ChunkLease{got.chunk().chunk(), got.epoch(),
                                              got.chunk().begin(),
                                              got.chunk().end()});
}

absl::StatusOr<v1::LeaseChunkResponse> WorkerSession::AwaitLease(
    const v1::LeaseChunkRequest& request) {
  const absl::Time start = absl::Now();
  absl::Time counted = start, next_log = start;
  int attempts = 0;
  absl::StatusOr<v1::LeaseChunkResponse> got;
  RetryOptions retry;
  retry.initial = std::chrono::milliseconds(50);
  retry.max = absl::ToChronoMilliseconds(options_.lease_backoff_max);
  const absl::Status s = RetryWithBackoff(
      [&]() -> absl::Status {
        if (attempts++ > 0 && options_.on_coordinator_wait) {
          const absl::Time now = absl::Now();
          options_.on_coordinator_wait(now - counted);
          counted = now;
        }
        got = link_->LeaseChunk(request);
        const absl::StatusCode code = got.status().code();
        if ((code == absl::StatusCode::kUnavailable ||
             code == absl::StatusCode::kDeadlineExceeded) &&
            Leaving()) {
          return absl::CancelledError("worker leaving the job");
        }
        return got.status();
      },
      retry, nullptr,
      [&](const absl::Status& failed) {
        if (absl::Now() < next_log) return;
        next_log = absl::Now() + absl::Seconds(10);
        std::cerr << "fulcrum-worker: " << assignment_.job_id
                  << ": no chunk lease, the coordinator does not answer ("
                  << failed.message() << "): waiting, no step is taken "
                  << "without data\n";
      });
  if (attempts > 1) {
    std::cerr << "fulcrum-worker: " << assignment_.job_id
              << ": the coordinator answered a chunk lease after "
              << absl::FormatDuration(
                     absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))
              << "\n";
  }
  if (!s.ok()) return s;
  return got;
}

void WorkerSession::Report(const v1::Progress& progress) {
  if (link_ != nullptr) link_->Update(progress);
}

bool WorkerSession::Leaving() const {
  return link_ != nullptr && link_->Leaving();
}

absl::Status WorkerSession::Close() {
  if (channel_ == nullptr) return absl::OkStatus();
  if (Leaving()) channel_->Cancel();
  absl::Status s = channel_->Close();
  channel_.reset();
  return s;
}

}  // namespace fulcrum
