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
  // The generation whose pushes this partition takes.
  int64_t generation ABSL_GUARDED_BY(mu) = 1;
  // sync: the values and optimizer state before the last applied step, so
  // that a membership change can undo a step that not every partition
  // applied. The optimizer writes out of place and the buffers swap.
  std::vector<float> prev_params ABSL_GUARDED_BY(mu);
  std::vector<float> prev_state ABSL_GUARDED_BY(mu);
  bool can_undo ABSL_GUARDED_BY(mu) = false;
  bool undo_swaps ABSL_GUARDED_BY(mu) = false;  // the last step changed values
  // The data ledger (held by partition 0 only): per chunk, the end of the
  // prefix of samples whose gradients these parameters include.
  bool tracks_ledger = false;
  fulcrum::Ledger ledger ABSL_GUARDED_BY(mu);
  // sync: this step's range per member; chunk -1 = none.
  struct Range {
    int64_t chunk = -1, begin = 0, end = 0;
  };
  std::vector<Range> member_range ABSL_GUARDED_BY(mu);
  // sync: the ledger entries the last applied step changed, with their
  // earlier values (end -1: absent).
  std::vector<std::pair<int64_t, LedgerEntry>> ledger_undo ABSL_GUARDED_BY(mu);
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
      generation_(init_.generation),
      workers_(init_.workers),
      clocks_(static_cast<int>(init_.workers.size()),
              static_cast<int>(
                  layout_.PartitionsOfShard(init_.shard_index).size()),
              init_.generation) {}

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
    p->generation = init.generation;
    p->tracks_ledger = id == 0;
    if (job->mode_ == Mode::kSync) {
      p->prev_params.assign(p->meta.size, 0.0f);
      p->prev_state.assign(p->state.size(), 0.0f);
    }
    job->ResetStepLocked(*p, members);
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
  absl::MutexLock lock(&members_mu_);
  if (generation < generation_) {
    return absl::AbortedError(
        absl::StrCat("generation ", generation, " is stale: job ", init_.job_id,
                     " is at generation ", generation_, "; re-join"));
  }
  if (generation > generation_ || !serving_) {
    return absl::UnavailableError(absl::StrCat(
        "job ", init_.job_id, " is being reconfigured to generation ",
        generation, " on this shard; retry"));
  }
  auto it = std::find(workers_.begin(), workers_.end(), worker_id);
  if (it == workers_.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker '", worker_id, "' is not a member of job ",
                     init_.job_id, " generation ", generation));
  }
  return static_cast<int>(it - workers_.begin());
}

int64_t JobShard::generation() const {
  absl::MutexLock lock(&members_mu_);
  return generation_;
}

std::vector<std::string> JobShard::workers() const {
  absl::MutexLock lock(&members_mu_);
  return workers_;
}

void JobShard::ResetStepLocked(PartitionState& p, int members) const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // REQUIRES: p.mu held
  std::fill(p.accum.begin(), p.accum.end(), 0.0f);
  p.got.assign(members * p.num_chunks, 0);
  p.got_count.assign(members, 0);
  p.member_samples.assign(members, -1);
  p.done.assign(members, 0);
  p.done_count = 0;
  p.total_samples = 0;
  p.stop_requested = false;
  p.first_done = absl::InfiniteFuture();
  p.member_range.assign(members, PartitionState::Range{});
  if (mode_ != Mode::kSync) {
    p.staging.assign(members * p.meta.size, 0.0f);
    p.member_step.resize(members, p.member_step.empty() ? 0 : p.member_step[0]);
  }
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
  // A NaN or infinity has every exponent bit set. One branch-free pass (it
  // vectorizes); the element is looked for only when there is one.
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, c.data + 4 * i, 4);
    any |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  if (any == 0) return absl::OkStatus();
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

absl::StatusOr<PushOutcome> JobShard::Push(int member, const PushChunk& c) {
  PartitionState* p = Find(c.partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("push.partition ", c.partition, " is not held by shard ",
                     init_.shard_index, " of job ", init_.job_id));
  }
  RETURN_IF_ERROR(Validate(*p, c));
  ASSIGN_OR_RETURN(PushOutcome outcome, mode_ == Mode::kSync
                                             ? PushSync(*p, member, c)
                                             : PushOnArrival(*p, member, c));
  if (c.stop && mode_ != Mode::kSync) stop_requested_ = true;
  if (outcome == PushOutcome::kCompleted &&
      clocks_.PartitionDone(member, c.step, c.generation) &&
      mode_ != Mode::kSync) {
    MaybeCheckpointByClock();
  }
  return outcome;
}

void JobShard::MaybeCheckpointByClock() {
  if (checkpointer_ == nullptr) return;
  const int64_t every = init_.spec.checkpoint().every_steps();
  const int64_t clock = clocks_.MinClock();
  if (clock == INT64_MAX || clock < every) return;
  const int64_t step = clock / every * every;
  absl::MutexLock serial(&clock_checkpoint_mu_);
  if (step <= clock_checkpoint_) return;
  clock_checkpoint_ = step;
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    checkpointer_->Add(step, id, SaveLocked(p));
  }
}

namespace {

absl::Status StaleGeneration(const std::string& job_id, int64_t have,
                             int64_t want) {
  return absl::AbortedError(absl::StrCat("generation ", have,
                                         " is stale: job ", job_id,
                                         " is at generation ", want,
                                         "; re-join"));
}

}  // namespace

absl::StatusOr<PushOutcome> JobShard::PushSync(PartitionState& p, int member,
                                               const PushChunk& c) {
  const int64_t chunk = c.samples == 0 ? 0 : c.offset / chunk_elems_;
  absl::MutexLock lock(&p.mu);
  if (p.ended)
    return absl::AbortedError(absl::StrCat("job ", init_.job_id, " ended"));
  if (c.generation != p.generation)
    return StaleGeneration(init_.job_id, c.generation, p.generation);
  // A retry of an applied step.
  if (c.step < p.version) return PushOutcome::kAlreadyComplete;
  if (c.step > p.version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push.step ", c.step, " is ahead of partition ", c.partition,
        " version ", p.version, " (sync mode: pull the new version first)"));
  }
  if (p.done[member]) return PushOutcome::kAlreadyComplete;
  if (c.samples > 0 && p.got[member * p.num_chunks + chunk])
    return PushOutcome::kPartial;  // a repeated chunk
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
  if (p.tracks_ledger && c.samples > 0 && c.range_chunk >= 0)
    p.member_range[member] = {c.range_chunk, c.range_begin, c.range_end};
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
    if (++p.got_count[member] < p.num_chunks) return PushOutcome::kPartial;
  }
  p.done[member] = 1;
  if (p.done_count == 0) p.first_done = absl::Now();
  if (++p.done_count < static_cast<int64_t>(p.done.size()))
    return PushOutcome::kCompleted;
  p.first_done = absl::InfiniteFuture();
  // Every member has pushed: apply the averaged gradient, out of place, so
  // that the previous version stays for an undo. A step that carries a stop
  // applies nothing: the final parameters are the ones rank 0 evaluated
  // when it decided to stop.
  const bool apply = p.total_samples > 0 && !p.stop_requested;
  p.undo_swaps = apply;
  if (apply) {
    const float inv = 1.0f / static_cast<float>(p.total_samples);
    ApplyUpdate(optimizer_, p.version, p.updates++, p.accum.data(),
                p.params.data(), p.state.data(), p.prev_params.data(),
                p.prev_state.data(), p.meta.size, inv);
    p.params.swap(p.prev_params);
    p.state.swap(p.prev_state);
  }
  std::fill(p.accum.begin(), p.accum.end(), 0.0f);
  p.can_undo = true;
  if (p.tracks_ledger) {
    p.ledger_undo.clear();
    for (PartitionState::Range& r : p.member_range) {
      if (r.chunk < 0 || !apply) {
        r.chunk = -1;
        continue;
      }
      auto it = p.ledger.find(r.chunk);
      p.ledger_undo.emplace_back(
          r.chunk, it == p.ledger.end() ? LedgerEntry{-1, 0} : it->second);
      LedgerEntry& e = p.ledger[r.chunk];
      e.end = std::max(e.end, r.end);
      e.samples += r.end - r.begin;
      r.chunk = -1;
    }
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
  return PushOutcome::kCompleted;
}

absl::StatusOr<PushOutcome> JobShard::PushOnArrival(PartitionState& p,
                                                    int member,
                                                    const PushChunk& c) {
  const int64_t chunk = c.samples == 0 ? 0 : c.offset / chunk_elems_;
  absl::MutexLock lock(&p.mu);
  if (p.ended)
    return absl::AbortedError(absl::StrCat("job ", init_.job_id, " ended"));
  if (c.generation != p.generation)
    return StaleGeneration(init_.job_id, c.generation, p.generation);
  const int64_t expected = p.member_step[member];
  // A retry of an applied step.
  if (c.step < expected) return PushOutcome::kAlreadyComplete;
  if (c.step > expected) {
    return absl::FailedPreconditionError(
        absl::StrCat("push.step ", c.step, " is ahead of this worker's step ",
                     expected, " on partition ", c.partition));
  }
  if (c.samples > 0 && p.got[member * p.num_chunks + chunk])
    return PushOutcome::kPartial;
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
    if (++p.got_count[member] < p.num_chunks) return PushOutcome::kPartial;
    // The member's whole gradient is here: apply it now, weighted so that
    // one step of every member moves as far as one synchronous step.
    const float* g = p.staging.data() + member * p.meta.size;
    const float scale = static_cast<float>(c.samples) /
                        static_cast<float>(int64_t{init_.spec.batch_size()} *
                                           clocks_.ActiveMembers());
    ApplyUpdate(optimizer_, c.step, p.updates++, g, p.params.data(),
                p.state.data(), p.meta.size, scale);
    ++p.version;
    if (p.tracks_ledger && c.range_chunk >= 0) {
      LedgerEntry& e = p.ledger[c.range_chunk];
      e.end = std::max(e.end, c.range_end);
      e.samples += c.range_end - c.range_begin;
    }
  }
  std::fill(p.got.begin() + member * p.num_chunks,
            p.got.begin() + (member + 1) * p.num_chunks, 0);
  p.got_count[member] = 0;
  p.member_samples[member] = -1;
  ++p.member_step[member];
  p.changed.SignalAll();
  return PushOutcome::kCompleted;
}

absl::Status JobShard::WaitForVersion(int32_t partition, int64_t version,
                                      int64_t generation, absl::Time deadline,
                                      const std::function<bool()>& cancelled) {
  PartitionState* p = Find(partition);
  if (p == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " not held here"));
  absl::MutexLock lock(&p->mu);
  while (p->version < version && !p->ended && p->generation == generation) {
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
  if (p->generation != generation)
    return StaleGeneration(init_.job_id, generation, p->generation);
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
// state (slot-major), then (format 2) the data ledger: a uint64 count and
// (chunk, end, samples) int64 triples. All little-endian. Format 1 blobs (no ledger)
// are still read.
struct SavedHeader {
  char magic[4];            // "FPS1"
  uint32_t format_version;  // kSavedFormat
  int32_t partition;
  int32_t slots;
  int64_t size;
  int64_t version;
  int64_t updates;
};
constexpr uint32_t kSavedFormat = 2;
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
  const uint64_t entries = p.ledger.size();
  std::string blob(sizeof(h) +
                       (p.params.size() + p.state.size()) * sizeof(float) +
                       sizeof(entries) + entries * 3 * sizeof(int64_t),
                   '\0');
  char* out = blob.data();
  std::memcpy(out, &h, sizeof(h));
  out += sizeof(h);
  std::memcpy(out, p.params.data(), p.params.size() * sizeof(float));
  out += p.params.size() * sizeof(float);
  std::memcpy(out, p.state.data(), p.state.size() * sizeof(float));
  out += p.state.size() * sizeof(float);
  std::memcpy(out, &entries, sizeof(entries));
  out += sizeof(entries);
  for (const auto& [chunk, e] : p.ledger) {
    const int64_t triple[3] = {chunk, e.end, e.samples};
    std::memcpy(out, triple, sizeof(triple));
    out += sizeof(triple);
  }
  return blob;
}

std::vector<JobShard::Stall> JobShard::Stalls(absl::Duration threshold) const {
  std::vector<Stall> stalls;
  const std::vector<std::string> names = workers();
  const absl::Time now = absl::Now();
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    if (p.ended || now - p.first_done < threshold) continue;
    Stall s{id, p.version, absl::ToDoubleSeconds(now - p.first_done), {}};
    for (size_t m = 0; m < p.done.size() && m < names.size(); ++m) {
      if (!p.done[m]) s.waiting_for.push_back(names[m]);
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
  absl::MutexLock lock(&p->mu);
  return RestoreLocked(*p, blob);
}

namespace {

// A SavePartition blob, checked against the partition it is for.
struct Saved {
  SavedHeader header;
  const char* values = nullptr;
  const char* state = nullptr;
  fulcrum::Ledger ledger;
};

absl::StatusOr<Saved> ParseSaved(std::string_view blob, int32_t partition,
                                 int64_t size, int slots) {
  Saved saved;
  SavedHeader& h = saved.header;
  if (blob.size() < sizeof(h)) {
    return absl::DataLossError(
        absl::StrCat("saved partition is truncated: ", blob.size(),
                     " bytes, the header alone is ", sizeof(h)));
  }
  std::memcpy(&h, blob.data(), sizeof(h));
  if (std::memcmp(h.magic, "FPS1", 4) != 0 ||
      (h.format_version != 1 && h.format_version != kSavedFormat)) {
    return absl::InvalidArgumentError(
        "not a saved partition of a known format");
  }
  if (h.partition != partition || h.size != size || h.slots != slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saved partition ", h.partition, " (", h.size, " elements, ", h.slots,
        " state slots) does not match partition ", partition, " (", size,
        ", ", slots, ")"));
  }
  const size_t body = sizeof(h) + (1 + h.slots) * h.size * sizeof(float);
  uint64_t entries = 0;
  if (h.format_version >= 2 && blob.size() >= body + sizeof(entries))
    std::memcpy(&entries, blob.data() + body, sizeof(entries));
  const size_t want =
      h.format_version < 2
          ? body
          : body + sizeof(entries) + entries * 3 * sizeof(int64_t);
  if (blob.size() != want || entries > blob.size()) {
    return absl::DataLossError(absl::StrCat("saved partition has ", blob.size(),
                                            " bytes, expected ", want));
  }
  saved.values = blob.data() + sizeof(h);
  saved.state = saved.values + h.size * sizeof(float);
  const char* in = blob.data() + body + sizeof(entries);
  for (uint64_t i = 0; i < entries; ++i) {
    int64_t triple[3];
    std::memcpy(triple, in, sizeof(triple));
    in += sizeof(triple);
    saved.ledger[triple[0]] = LedgerEntry{triple[1], triple[2]};
  }
  return saved;
}

}  // namespace

absl::Status JobShard::RestoreLocked(PartitionState& p, std::string_view blob)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // REQUIRES: p.mu held
  ASSIGN_OR_RETURN(Saved saved, ParseSaved(blob, p.meta.id, p.meta.size,
                                           optimizer_.StateSlots()));
  std::memcpy(p.params.data(), saved.values, p.params.size() * sizeof(float));
  std::memcpy(p.state.data(), saved.state, p.state.size() * sizeof(float));
  p.version = saved.header.version;
  p.updates = saved.header.updates;
  p.ledger = std::move(saved.ledger);
  p.can_undo = false;
  p.stop = false;
  ResetStepLocked(p, static_cast<int>(p.done.size()));
  p.changed.SignalAll();
  return absl::OkStatus();
}

absl::Status JobShard::RestoreCheckpoint(int64_t step) {
  if (step < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("restore_step must be >= 0, got ", step));
  if (step == 0) {  // the initial parameters
    for (int32_t id : ids_) {
      PartitionState& p = *slots_[id];
      absl::MutexLock lock(&p.mu);
      InitializeParameters(layout_, init_.spec.seed(), p.meta.offset,
                           p.meta.offset + p.meta.size, p.params.data());
      std::fill(p.state.begin(), p.state.end(), 0.0f);
      p.version = 0;
      p.updates = 0;
      p.ledger.clear();
      p.can_undo = false;
      p.stop = false;
      ResetStepLocked(p, static_cast<int>(p.done.size()));
    }
    if (checkpointer_ != nullptr) checkpointer_->DropAfter(0);
    return absl::OkStatus();
  }
  const std::string path = CheckpointPath(init_.spec.checkpoint().dir(),
                                          init_.job_id, step, init_.shard_index);
  ASSIGN_OR_RETURN(CheckpointFile file, ReadCheckpoint(path));
  if (file.job_id != init_.job_id || file.step != step ||
      file.shard != init_.shard_index ||
      file.partitions.size() != ids_.size()) {
    return absl::DataLossError(absl::StrCat(
        path, " holds job ", file.job_id, " step ", file.step, " shard ",
        file.shard, " with ", file.partitions.size(), " partitions; expected ",
        init_.job_id, " step ", step, " shard ", init_.shard_index, " with ",
        ids_.size()));
  }
  // Check every blob before changing anything: all or nothing.
  for (const auto& [id, blob] : file.partitions) {
    const PartitionState* p = Find(id);
    if (p == nullptr)
      return absl::DataLossError(
          absl::StrCat(path, " holds partition ", id, ", not held here"));
    absl::Status s =
        ParseSaved(blob, id, p->meta.size, optimizer_.StateSlots()).status();
    if (!s.ok())
      return absl::DataLossError(absl::StrCat(path, ": ", s.message()));
  }
  for (const auto& [id, blob] : file.partitions) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    RETURN_IF_ERROR(RestoreLocked(p, blob));
  }
  if (checkpointer_ != nullptr) checkpointer_->DropAfter(step);
  return absl::OkStatus();
}

absl::StatusOr<Reconfigured> JobShard::Reconfigure(
    int64_t generation, const std::vector<std::string>& workers,
    int64_t align_version, bool restore, int64_t restore_step) {
  absl::MutexLock serial(&reconfigure_mu_);
  if (ended_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", init_.job_id, " has ended"));
  }
  if (workers.empty())
    return absl::InvalidArgumentError("workers must not be empty");
  if (std::set<std::string>(workers.begin(), workers.end()).size() !=
      workers.size()) {
    return absl::InvalidArgumentError("workers must be unique");
  }
  const int members = static_cast<int>(workers.size());
  {
    absl::MutexLock lock(&members_mu_);
    if (generation < generation_ ||
        (align_version >= 0 && generation != generation_)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "generation ", generation, " does not follow job ", init_.job_id,
          "'s generation ", generation_, " on this shard"));
    }
  }
  Reconfigured result;
  if (align_version < 0) {
    // Phase 1: adopt the generation; end the old one's waits and pushes.
    if (restore) RETURN_IF_ERROR(RestoreCheckpoint(restore_step));
    {
      absl::MutexLock lock(&members_mu_);
      generation_ = generation;
      workers_ = workers;
      serving_ = false;
    }
    int64_t lo = INT64_MAX, hi = 0;
    for (int32_t id : ids_) {
      PartitionState& p = *slots_[id];
      absl::MutexLock lock(&p.mu);
      p.generation = generation;
      ResetStepLocked(p, members);
      lo = std::min(lo, p.version);
      hi = std::max(hi, p.version);
      p.changed.SignalAll();
    }
    if (mode_ != Mode::kSync) {  // clocks, not update counts
      if (restore) {
        lo = hi = restore_step;  // every member resumes at the checkpoint
      } else {
        lo = clocks_.MinClock();
        hi = clocks_.MaxClock();
        if (lo == INT64_MAX) lo = hi;  // every member had finished
      }
    }
    clocks_.Reset(members, 0, generation);
    result.min_version = lo == INT64_MAX ? 0 : lo;
    result.max_version = hi;
    return result;
  }
  // Phase 2: align every partition to align_version, then serve.
  if (mode_ == Mode::kSync) {
    for (int32_t id : ids_) {
      PartitionState& p = *slots_[id];
      absl::MutexLock lock(&p.mu);
      if (p.version != align_version &&
          !(p.version == align_version + 1 && p.can_undo)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "partition ", id, " is at version ", p.version,
            " and cannot be aligned to ", align_version));
      }
    }
  }
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    if (mode_ == Mode::kSync && p.version == align_version + 1) {
      // Undo the step that not every partition applied.
      if (p.undo_swaps) {
        p.params.swap(p.prev_params);
        p.state.swap(p.prev_state);
        --p.updates;
      }
      for (auto it = p.ledger_undo.rbegin(); it != p.ledger_undo.rend(); ++it) {
        if (it->second.end < 0) {
          p.ledger.erase(it->first);
        } else {
          p.ledger[it->first] = it->second;
        }
      }
      p.ledger_undo.clear();
      --p.version;
      p.can_undo = false;
      p.stop = false;
    }
    if (mode_ != Mode::kSync) p.member_step.assign(members, align_version);
    if (p.tracks_ledger) {
      result.has_ledger = true;
      result.ledger = p.ledger;
    }
    result.min_version = result.max_version = p.version;
  }
  if (checkpointer_ != nullptr) checkpointer_->DropAfter(align_version);
  clocks_.Reset(members, align_version, generation);
  if (mode_ != Mode::kSync) {
    absl::MutexLock lock(&clock_checkpoint_mu_);
    clock_checkpoint_ = align_version;
  }
  {
    absl::MutexLock lock(&members_mu_);
    serving_ = true;
  }
  return result;
}

bool JobShard::Ledger(fulcrum::Ledger* out) const {
  PartitionState* p = Find(0);
  if (p == nullptr || !p->tracks_ledger) return false;
  absl::MutexLock lock(&p->mu);
  *out = p->ledger;
  return true;
}

std::vector<int64_t> JobShard::CheckpointSteps() const {
  if (checkpointer_ == nullptr) return {};
  return ListCheckpointSteps(init_.spec.checkpoint().dir(), init_.job_id,
                             init_.shard_index);
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
