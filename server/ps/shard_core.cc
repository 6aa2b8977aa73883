#include "server/ps/shard_core.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/config/job_spec.h"
#include "common/status/status_macros.h"

namespace fulcrum {

struct JobShard::PartitionState {
  Partition meta;
  int64_t num_chunks = 0;
  absl::Mutex mu;
  absl::CondVar changed;
  std::vector<float> params ABSL_GUARDED_BY(mu);
  std::vector<float> state ABSL_GUARDED_BY(mu);  // optimizer state
  std::vector<float> accum ABSL_GUARDED_BY(mu);  // sum of g_i * n_i
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  int64_t updates ABSL_GUARDED_BY(mu) = 0;  // optimizer steps taken (Adam's k)
  bool stop ABSL_GUARDED_BY(mu) = false;    // stop at `version`
  bool stop_requested ABSL_GUARDED_BY(mu) = false;
  bool ended ABSL_GUARDED_BY(mu) = false;
  // Current step's progress, per member.
  std::vector<uint8_t> got ABSL_GUARDED_BY(mu);  // [member * num_chunks + c]
  std::vector<int64_t> got_count ABSL_GUARDED_BY(mu);
  std::vector<int64_t> member_samples ABSL_GUARDED_BY(mu);  // -1: none yet
  std::vector<uint8_t> done ABSL_GUARDED_BY(mu);
  int64_t done_count ABSL_GUARDED_BY(mu) = 0;
  int64_t total_samples ABSL_GUARDED_BY(mu) = 0;
  // When the first member finished its push of the current step (sync).
  absl::Time first_done ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  // ssp/async only: each member's gradient until all its chunks arrived
  // ([member * size + i]) and the step each member is pushing.
  std::vector<float> staging ABSL_GUARDED_BY(mu);
  std::vector<int64_t> member_step ABSL_GUARDED_BY(mu);
};

JobShard::JobShard(JobInit init, ParameterLayout layout)
    : init_(std::move(init)),
      layout_(std::move(layout)),
      optimizer_(OptimizerConfig::FromSpec(init_.spec.optimizer())),
      chunk_elems_(init_.spec.chunk_bytes() / 4),
      // ssp(0) runs as sync: a read at clock c that must include every
      // member's step c-1 is the BSP barrier, and applying on arrival would
      // only let some readers also see other members' step-c updates.
      mode_(init_.spec.consistency().mode() == "async" ? Mode::kAsync
            : init_.spec.consistency().mode() == "ssp" &&
                    init_.spec.consistency().staleness() > 0
                ? Mode::kSsp
                : Mode::kSync),
      clocks_(static_cast<int>(init_.workers.size()),
              static_cast<int>(
                  layout_.PartitionsOfShard(init_.shard_index).size())) {}

int64_t JobShard::read_bound() const {
  switch (mode_) {
    case Mode::kSync:
      return 0;
    case Mode::kSsp:
      return init_.spec.consistency().staleness();
    case Mode::kAsync:
      return -1;
  }
  return 0;
}

JobShard::~JobShard() = default;

absl::StatusOr<std::unique_ptr<JobShard>> JobShard::Create(
    const JobInit& init) {
  if (init.job_id.empty())
    return absl::InvalidArgumentError("job_id must not be empty");
  RETURN_IF_ERROR(ValidateJobSpec(init.spec));
  if (init.num_shards != init.spec.shards()) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards ", init.num_shards,
                     " does not match spec.shards ", init.spec.shards()));
  }
  if (init.shard_index < 0 || init.shard_index >= init.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index must be in [0, ", init.num_shards, "), got ",
                     init.shard_index));
  }
  if (init.generation < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation must be >= 1, got ", init.generation));
  }
  if (init.workers.empty())
    return absl::InvalidArgumentError("workers must not be empty");
  if (std::set<std::string>(init.workers.begin(), init.workers.end()).size() !=
      init.workers.size()) {
    return absl::InvalidArgumentError("workers must be unique");
  }
  const auto& layers = init.spec.model().layers();
  ASSIGN_OR_RETURN(
      ParameterLayout layout,
      ParameterLayout::ForMlp(std::vector<int>(layers.begin(), layers.end()),
                              init.num_shards, init.spec.partition_bytes()));
  std::unique_ptr<JobShard> job(new JobShard(init, std::move(layout)));
  const int members = static_cast<int>(init.workers.size());
  job->slots_.resize(job->layout_.partitions().size());
  for (int32_t id : job->layout_.PartitionsOfShard(init.shard_index)) {
    auto p = std::make_unique<PartitionState>();
    p->meta = job->layout_.partitions()[id];
    p->num_chunks = (p->meta.size + job->chunk_elems_ - 1) / job->chunk_elems_;
    absl::MutexLock lock(&p->mu);
    p->params.resize(p->meta.size);
    InitializeParameters(job->layout_, init.spec.seed(), p->meta.offset,
                         p->meta.offset + p->meta.size, p->params.data());
    p->state.assign(p->meta.size * job->optimizer_.StateSlots(), 0.0f);
    p->accum.assign(p->meta.size, 0.0f);
    p->got.assign(members * p->num_chunks, 0);
    p->got_count.assign(members, 0);
    p->member_samples.assign(members, -1);
    p->done.assign(members, 0);
    if (job->mode_ != Mode::kSync) {
      p->staging.assign(members * p->meta.size, 0.0f);
      p->member_step.assign(members, 0);
    }
    job->ids_.push_back(id);
    job->slots_[id] = std::move(p);
  }
  const v1::CheckpointSpec& ck = init.spec.checkpoint();
  if (ck.every_steps() > 0 && !job->ids_.empty()) {
    job->checkpointer_ =
        std::make_unique<CheckpointWriter>(CheckpointWriter::Options{
            ck.dir(), init.job_id, init.shard_index,
            static_cast<int>(job->ids_.size()), ck.keep(), init.on_checkpoint});
  }
  return job;
}

absl::StatusOr<int> JobShard::MemberIndex(const std::string& worker_id,
                                          int64_t generation) const {
  if (generation != init_.generation) {
    return absl::AbortedError(
        absl::StrCat("generation ", generation, " is stale: job ", init_.job_id,
                     " is at generation ", init_.generation, "; re-join"));
  }
  auto it = std::find(init_.workers.begin(), init_.workers.end(), worker_id);
  if (it == init_.workers.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker '", worker_id, "' is not a member of job ",
                     init_.job_id, " generation ", generation));
  }
  return static_cast<int>(it - init_.workers.begin());
}

JobShard::PartitionState* JobShard::Find(int32_t partition) const {
  if (partition < 0 || partition >= static_cast<int32_t>(slots_.size()))
    return nullptr;
  return slots_[partition].get();
}

int64_t JobShard::PartitionSize(int32_t partition) const {
  const PartitionState* p = Find(partition);
  return p == nullptr ? -1 : p->meta.size;
}

absl::Status JobShard::Validate(const PartitionState& p,
                                const PushChunk& c) const {
  if (c.step < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("push.step must be >= 0, got ", c.step));
  if (c.samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("push.samples must be >= 0, got ", c.samples));
  }
  if (c.samples == 0) {
    if (c.bytes != 0 || c.offset != 0) {
      return absl::InvalidArgumentError(
          "push.data must be empty and push.offset 0 when push.samples is 0");
    }
    return absl::OkStatus();
  }
  if (c.offset < 0 || c.offset >= p.meta.size || c.offset % chunk_elems_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.offset ", c.offset, " is not a chunk boundary of partition ",
        p.meta.id, " (size ", p.meta.size, ", chunk ", chunk_elems_,
        " elements)"));
  }
  const int64_t expected = std::min(chunk_elems_, p.meta.size - c.offset) * 4;
  if (static_cast<int64_t>(c.bytes) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("push.data has ", c.bytes, " bytes, expected ", expected,
                     " for partition ", p.meta.id, " offset ", c.offset));
  }
  const int64_t n = expected / 4;
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, c.data + 4 * i, 4);
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("push.data element ", c.offset + i, " of partition ",
                       p.meta.id, " is not finite (", v, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> JobShard::Push(int member, const PushChunk& c) {
  PartitionState* p = Find(c.partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("push.partition ", c.partition, " is not held by shard ",
                     init_.shard_index, " of job ", init_.job_id));
  }
  RETURN_IF_ERROR(Validate(*p, c));
  ASSIGN_OR_RETURN(bool finished, mode_ == Mode::kSync
                                      ? PushSync(*p, member, c)
                                      : PushOnArrival(*p, member, c));
  if (c.stop && mode_ != Mode::kSync) stop_requested_ = true;
  if (finished) clocks_.PartitionDone(member, c.step);
  return finished;
}

absl::StatusOr<bool> JobShard::PushSync(PartitionState& p, int member,
                                        const PushChunk& c) {
  const int64_t chunk = c.samples == 0 ? 0 : c.offset / chunk_elems_;
  absl::MutexLock lock(&p.mu);
  if (p.ended)
    return absl::AbortedError(absl::StrCat("job ", init_.job_id, " ended"));
  if (c.step < p.version) return false;  // a retry of an applied step
  if (c.step > p.version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push.step ", c.step, " is ahead of partition ", c.partition,
        " version ", p.version, " (sync mode: pull the new version first)"));
  }
  if (p.done[member] ||
      (c.samples > 0 && p.got[member * p.num_chunks + chunk])) {
    return false;  // repeated chunk
  }
  if (p.member_samples[member] >= 0 && p.member_samples[member] != c.samples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.samples ", c.samples, " differs from ", p.member_samples[member],
        " in an earlier chunk of the same step"));
  }
  if (p.member_samples[member] < 0) {
    p.member_samples[member] = c.samples;
    p.total_samples += c.samples;
  }
  p.stop_requested |= c.stop;
  if (c.samples > 0) {
    const float w = static_cast<float>(c.samples);
    const int64_t n = c.bytes / 4;
    float* acc = p.accum.data() + c.offset;
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, c.data + 4 * i, 4);
      acc[i] += v * w;
    }
    p.got[member * p.num_chunks + chunk] = 1;
    if (++p.got_count[member] < p.num_chunks) return false;
  }
  p.done[member] = 1;
  if (p.done_count == 0) p.first_done = absl::Now();
  if (++p.done_count < static_cast<int64_t>(p.done.size())) return true;
  p.first_done = absl::InfiniteFuture();
  // Every member has pushed: apply the averaged gradient.
  if (p.total_samples > 0) {
    const float inv = 1.0f / static_cast<float>(p.total_samples);
    for (float& a : p.accum) a *= inv;
    ApplyUpdate(optimizer_, p.version, p.updates++, p.accum.data(),
                p.params.data(), p.state.data(), p.meta.size);
    std::fill(p.accum.begin(), p.accum.end(), 0.0f);
  }
  ++p.version;
  const int64_t every = init_.spec.checkpoint().every_steps();
  if (checkpointer_ != nullptr && p.version % every == 0) {
    checkpointer_->Add(p.version, p.meta.id,
                       SaveLocked(p));  // a consistent cut at version
  }
  p.stop = p.stop_requested;
  p.stop_requested = false;
  std::fill(p.got.begin(), p.got.end(), 0);
  std::fill(p.got_count.begin(), p.got_count.end(), 0);
  std::fill(p.member_samples.begin(), p.member_samples.end(), -1);
  std::fill(p.done.begin(), p.done.end(), 0);
  p.done_count = 0;
  p.total_samples = 0;
  p.changed.SignalAll();
  return true;
}

absl::StatusOr<bool> JobShard::PushOnArrival(PartitionState& p, int member,
                                             const PushChunk& c) {
  const int64_t chunk = c.samples == 0 ? 0 : c.offset / chunk_elems_;
  absl::MutexLock lock(&p.mu);
  if (p.ended)
    return absl::AbortedError(absl::StrCat("job ", init_.job_id, " ended"));
  const int64_t expected = p.member_step[member];
  if (c.step < expected) return false;  // a retry of an applied step
  if (c.step > expected) {
    return absl::FailedPreconditionError(
        absl::StrCat("push.step ", c.step, " is ahead of this worker's step ",
                     expected, " on partition ", c.partition));
  }
  if (c.samples > 0 && p.got[member * p.num_chunks + chunk]) return false;
  if (p.member_samples[member] >= 0 && p.member_samples[member] != c.samples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.samples ", c.samples, " differs from ", p.member_samples[member],
        " in an earlier chunk of the same step"));
  }
  p.member_samples[member] = c.samples;
  if (c.samples > 0) {
    float* staged = p.staging.data() + member * p.meta.size + c.offset;
    std::memcpy(staged, c.data, c.bytes);
    p.got[member * p.num_chunks + chunk] = 1;
    if (++p.got_count[member] < p.num_chunks) return false;
    // The member's whole gradient is here: apply it now, weighted so that
    // one step of every member moves as far as one synchronous step.
    float* g = p.staging.data() + member * p.meta.size;
    const float scale = static_cast<float>(c.samples) /
                        static_cast<float>(int64_t{init_.spec.batch_size()} *
                                           clocks_.ActiveMembers());
    for (int64_t i = 0; i < p.meta.size; ++i) g[i] *= scale;
    ApplyUpdate(optimizer_, c.step, p.updates++, g, p.params.data(),
                p.state.data(), p.meta.size);
    ++p.version;
  }
  std::fill(p.got.begin() + member * p.num_chunks,
            p.got.begin() + (member + 1) * p.num_chunks, 0);
  p.got_count[member] = 0;
  p.member_samples[member] = -1;
  ++p.member_step[member];
  p.changed.SignalAll();
  return true;
}

absl::Status JobShard::WaitForVersion(int32_t partition, int64_t version,
                                      absl::Time deadline,
                                      const std::function<bool()>& cancelled) {
  PartitionState* p = Find(partition);
  if (p == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " not held here"));
  absl::MutexLock lock(&p->mu);
  while (p->version < version && !p->ended) {
    if (cancelled && cancelled())
      return absl::CancelledError("stream cancelled");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("partition ", partition, " still at version ",
                       p->version, ", waiting for ", version));
    }
    p->changed.WaitWithDeadline(
        &p->mu, std::min(deadline, now + absl::Milliseconds(100)));
  }
  if (p->version < version)
    return absl::AbortedError(absl::StrCat("job ", init_.job_id, " ended"));
  return absl::OkStatus();
}

absl::Status JobShard::Read(int32_t partition, int64_t offset, int64_t n,
                            float* out, int64_t* version, bool* stop) {
  PartitionState* p = Find(partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " is not held by shard ",
                     init_.shard_index, " of job ", init_.job_id));
  }
  if (offset < 0 || n < 0 || offset + n > p->meta.size) {
    return absl::OutOfRangeError(
        absl::StrCat("range [", offset, ", ", offset + n,
                     ") outside partition ", partition));
  }
  absl::MutexLock lock(&p->mu);
  std::memcpy(out, p->params.data() + offset, n * sizeof(float));
  *version = p->version;
  *stop = p->stop || stop_requested_.load();
  return absl::OkStatus();
}

namespace {

// SavePartition's blob: a fixed header, then the values, then the optimizer
// state (slot-major), all little-endian.
struct SavedHeader {
  char magic[4];            // "FPS1"
  uint32_t format_version;  // kSavedFormat
  int32_t partition;
  int32_t slots;
  int64_t size;
  int64_t version;
  int64_t updates;
};
constexpr uint32_t kSavedFormat = 1;
static_assert(sizeof(SavedHeader) == 40,
              "the blob layout is part of the format");

}  // namespace

absl::StatusOr<std::string> JobShard::SavePartition(int32_t partition) const {
  PartitionState* p = Find(partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " is not held by this shard"));
  }
  absl::MutexLock lock(&p->mu);
  return SaveLocked(*p);
}

std::string JobShard::SaveLocked(const PartitionState& p) const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // REQUIRES: p.mu held
  SavedHeader h{
      {'F', 'P', 'S', '1'}, kSavedFormat, p.meta.id, optimizer_.StateSlots(),
      p.meta.size,          p.version,    p.updates};
  std::string blob(
      sizeof(h) + (p.params.size() + p.state.size()) * sizeof(float), '\0');
  char* out = blob.data();
  std::memcpy(out, &h, sizeof(h));
  out += sizeof(h);
  std::memcpy(out, p.params.data(), p.params.size() * sizeof(float));
  out += p.params.size() * sizeof(float);
  std::memcpy(out, p.state.data(), p.state.size() * sizeof(float));
  return blob;
}

std::vector<JobShard::Stall> JobShard::Stalls(absl::Duration threshold) const {
  std::vector<Stall> stalls;
  const absl::Time now = absl::Now();
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    if (p.ended || now - p.first_done < threshold) continue;
    Stall s{id, p.version, absl::ToDoubleSeconds(now - p.first_done), {}};
    for (size_t m = 0; m < p.done.size(); ++m) {
      if (!p.done[m]) s.waiting_for.push_back(init_.workers[m]);
    }
    stalls.push_back(std::move(s));
  }
  return stalls;
}

int64_t JobShard::LastCheckpoint() const {
  return checkpointer_ == nullptr ? -1 : checkpointer_->last_written();
}

absl::Status JobShard::RestorePartition(int32_t partition,
                                        std::string_view blob) {
  PartitionState* p = Find(partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " is not held by this shard"));
  }
  SavedHeader h;
  if (blob.size() < sizeof(h)) {
    return absl::DataLossError(
        absl::StrCat("saved partition is truncated: ", blob.size(),
                     " bytes, the header alone is ", sizeof(h)));
  }
  std::memcpy(&h, blob.data(), sizeof(h));
  if (std::memcmp(h.magic, "FPS1", 4) != 0 ||
      h.format_version != kSavedFormat) {
    return absl::InvalidArgumentError(
        "not a saved partition of a known format");
  }
  if (h.partition != partition || h.size != p->meta.size ||
      h.slots != optimizer_.StateSlots()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saved partition ", h.partition, " (", h.size, " elements, ", h.slots,
        " state slots) does not match partition ", partition, " (",
        p->meta.size, ", ", optimizer_.StateSlots(), ")"));
  }
  const size_t want = sizeof(h) + (1 + h.slots) * h.size * sizeof(float);
  if (blob.size() != want) {
    return absl::DataLossError(absl::StrCat("saved partition has ", blob.size(),
                                            " bytes, expected ", want));
  }
  absl::MutexLock lock(&p->mu);
  const char* in = blob.data() + sizeof(h);
  std::memcpy(p->params.data(), in, p->params.size() * sizeof(float));
  in += p->params.size() * sizeof(float);
  std::memcpy(p->state.data(), in, p->state.size() * sizeof(float));
  p->version = h.version;
  p->updates = h.updates;
  std::fill(p->accum.begin(), p->accum.end(), 0.0f);
  std::fill(p->got.begin(), p->got.end(), 0);
  std::fill(p->got_count.begin(), p->got_count.end(), 0);
  std::fill(p->member_samples.begin(), p->member_samples.end(), -1);
  std::fill(p->done.begin(), p->done.end(), 0);
  p->done_count = 0;
  p->total_samples = 0;
  p->changed.SignalAll();
  return absl::OkStatus();
}

void JobShard::End() {
  ended_ = true;
  clocks_.End();
  for (auto& p : slots_) {
    if (p == nullptr) continue;
    absl::MutexLock lock(&p->mu);
    p->ended = true;
    p->changed.SignalAll();
  }
}

namespace {

// Whether an existing job was created by an identical InitJob.
absl::Status SameInit(const JobInit& have, const JobInit& want) {
  if (have.spec.SerializeAsString() != want.spec.SerializeAsString() ||
      have.shard_index != want.shard_index ||
      have.num_shards != want.num_shards ||
      have.generation != want.generation || have.workers != want.workers) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", want.job_id,
                     " is already initialised here with another spec, "
                     "placement or membership"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<JobShard>> ParameterShard::InitJob(
    const JobInit& init) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(init.job_id);
    if (it != jobs_.end()) {
      RETURN_IF_ERROR(SameInit(it->second->init(), init));
      return it->second;
    }
  }
  // Build outside the lock: initialising large models takes a while.
  ASSIGN_OR_RETURN(std::unique_ptr<JobShard> created, JobShard::Create(init));
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = jobs_.emplace(init.job_id, std::move(created));
  if (!inserted)
    RETURN_IF_ERROR(SameInit(it->second->init(), init));  // lost a race
  return it->second;
}

absl::StatusOr<std::shared_ptr<JobShard>> ParameterShard::Find(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' is not known to this shard"));
  }
  return it->second;
}

void ParameterShard::EndJob(const std::string& job_id) {
  std::shared_ptr<JobShard> evicted;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second->ended()) return;
    it->second->End();
    ended_.push_back(job_id);
    if (ended_.size() > kKeepEnded) {
      auto old = jobs_.find(ended_.front());
      if (old != jobs_.end()) {
        evicted = std::move(old->second);
        jobs_.erase(old);
      }
      ended_.pop_front();
    }
  }
}

void ParameterShard::ForgetJob(const std::string& job_id) {
  std::shared_ptr<JobShard> job;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    job = std::move(it->second);
    jobs_.erase(it);
    ended_.erase(std::remove(ended_.begin(), ended_.end(), job_id),
                 ended_.end());
  }
  job->End();
}

std::vector<std::string> ParameterShard::JobIds() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  return ids;
}

}  // namespace fulcrum
