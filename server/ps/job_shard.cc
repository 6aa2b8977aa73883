#include "server/ps/job_shard.h"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/concurrency/deferred_calls.h"
#include "common/config/job_spec.h"
#include "common/config/model_layout.h"
#include "common/status/payloads.h"
#include "common/status/status_macros.h"

namespace fulcrum {

absl::Status StaleGeneration(const std::string& job_id, int64_t have,
                             int64_t want) {
  return absl::AbortedError(absl::StrCat("generation ", have,
                                         " is stale: job ", job_id,
                                         " is at generation ", want,
                                         "; re-join"));
}

absl::Status CheckMembers(const std::vector<std::string>& workers) {
  if (workers.empty())
    return absl::InvalidArgumentError("workers must not be empty");
  if (std::set<std::string>(workers.begin(), workers.end()).size() !=
      workers.size()) {
    return absl::InvalidArgumentError("workers must be unique");
  }
  return absl::OkStatus();
}

namespace {

// ssp(0) runs as sync: a read at clock c that must include every member's
// step c-1 is the BSP barrier, and applying on arrival would only let some
// readers also see other members' step-c updates.
JobShard::Mode ModeOf(const v1::ConsistencySpec& c) {
  if (c.mode() == "async") return JobShard::Mode::kAsync;
  if (c.mode() == "ssp" && c.staleness() > 0) return JobShard::Mode::kSsp;
  return JobShard::Mode::kSync;
}

// The optimizer the shards run: the job's, but plain SGD when the workers
// apply the momentum (sparsified gradients with momentum correction).
OptimizerConfig ShardOptimizer(const v1::JobSpec& spec) {
  OptimizerConfig c = OptimizerConfig::FromSpec(spec.optimizer());
  if (MomentumOnWorkers(spec)) {
    c.type = OptimizerConfig::Type::kSgd;
    c.momentum = 0.0f;
  }
  return c;
}

absl::Status CheckInit(const JobInit& init) {
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
  if (init.env == nullptr) return absl::InvalidArgumentError("env is null");
  return CheckMembers(init.workers);
}

}  // namespace

JobShard::JobShard(JobInit init, ParameterLayout layout)
    : init_(std::move(init)),
      layout_(std::move(layout)),
      optimizer_(ShardOptimizer(init_.spec)),
      chunk_elems_(init_.spec.chunk_bytes() / 4),
      mode_(ModeOf(init_.spec.consistency())),
      generation_(init_.generation),
      workers_(init_.workers),
      clocks_(static_cast<int>(init_.workers.size()),
              static_cast<int>(
                  layout_.PartitionsOfShard(init_.shard_index).size()),
              init_.generation) {}

JobShard::~JobShard() = default;

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

absl::StatusOr<std::unique_ptr<JobShard>> JobShard::Create(
    const JobInit& init) {
  RETURN_IF_ERROR(CheckInit(init));
  ASSIGN_OR_RETURN(ParameterLayout layout, LayoutForSpec(init.spec));
  std::unique_ptr<JobShard> job(new JobShard(init, std::move(layout)));
  job->embeddings_ = std::make_unique<EmbeddingTables>(
      init.spec, init.shard_index, init.num_shards, init.env,
      static_cast<int>(init.workers.size()), init.generation);
  const std::vector<int32_t> ids =
      job->layout_.PartitionsOfShard(init.shard_index);
  const v1::CheckpointSpec& ck = init.spec.checkpoint();
  // A shard holding no partition but embedding rows checkpoints them by
  // the members' row clocks (job_shard_embeddings.cc).
  if (ck.every_steps() > 0 && (!ids.empty() || !job->embeddings_->empty())) {
    CheckpointWriter::Options o{job->checkpoint_dir(), init.job_id,
                                init.shard_index,
                                static_cast<int>(ids.size()), ck.keep(),
                                init.on_checkpoint, init.env};
    // The tables' rows join each file as it is written (embeddings.md,
    // Checkpoints). embeddings_ outlives the writer (declared before it).
    if (!job->embeddings_->empty()) {
      EmbeddingTables* tables = job->embeddings_.get();
      o.more = [tables, job_id = init.job_id](int64_t step) {
        EmbeddingTables::Saved saved = tables->Save(step);
        if (!saved.late.ok()) {
          std::cerr << "fulcrum-server: job " << job_id << " checkpoint "
                    << step << ": embedding rows copied without waiting "
                    << "longer: " << saved.late << "\n";
        }
        return CheckpointWriter::Options::More{
            std::move(saved.blobs), saved.base, std::move(saved.skip)};
      };
      o.more_written = [tables](int64_t step, bool ok) {
        tables->Written(step, ok);
      };
    }
    job->checkpointer_ = std::make_unique<CheckpointWriter>(std::move(o));
    job->rows_only_ = ids.empty();
  }
  Aggregator::Context context{init.job_id,
                              job->optimizer_,
                              job->chunk_elems_,
                              init.spec.batch_size(),
                              init.env,
                              job->checkpointer_.get(),
                              ck.every_steps(),
                              &job->clocks_};
  job->aggregator_ = job->mode_ == Mode::kSync
                         ? NewSyncAggregator(std::move(context))
                         : NewArrivalAggregator(std::move(context));
  const int members = static_cast<int>(init.workers.size());
  job->slots_.resize(job->layout_.partitions().size());
  for (int32_t id : ids) {
    auto p = std::make_unique<PartitionState>();
    p->meta = job->layout_.partitions()[id];
    p->num_chunks = (p->meta.size + job->chunk_elems_ - 1) / job->chunk_elems_;
    p->tracks_ledger = id == 0;
    p->buffers = BufferRanges(job->layout_, p->meta);
    absl::MutexLock lock(&p->mu);
    p->params.resize(p->meta.size);
    InitializeParameters(job->layout_, init.spec.seed(), p->meta.offset,
                         p->meta.offset + p->meta.size, p->params.data());
    p->state.assign(p->meta.size * job->optimizer_.StateSlots(), 0.0f);
    p->generation = init.generation;
    job->aggregator_->Init(*p, members);
    job->ids_.push_back(id);
    job->slots_[id] = std::move(p);
  }
  if (init.spec.model().type() == "external") job->AwaitValues();
  return job;
}

absl::StatusOr<int> JobShard::MemberIndex(const std::string& worker_id,
                                          int64_t generation) const {
  absl::MutexLock lock(&members_mu_);
  if (generation < generation_)
    return StaleGeneration(init_.job_id, generation, generation_);
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

PartitionState* JobShard::Find(int32_t partition) const {
  if (partition < 0 || partition >= static_cast<int32_t>(slots_.size()))
    return nullptr;
  return slots_[partition].get();
}

int64_t JobShard::PartitionSize(int32_t partition) const {
  const PartitionState* p = Find(partition);
  return p == nullptr ? -1 : p->meta.size;
}

absl::StatusOr<PushOutcome> JobShard::Push(absl::Span<const int> members,
                                           const PushChunk& c) {
  DeferredCalls scope;  // OnVersion callbacks run after the locks
  PartitionState* p = Find(c.partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("push.partition ", c.partition, " is not held by shard ",
                     init_.shard_index, " of job ", init_.job_id));
  }
  if (members.empty() ||
      (members.size() > 1 && c.shares.size() != members.size()) ||
      (members.size() == 1 && !c.shares.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.shares has ", c.shares.size(), " entries; the stream pushes for ",
        members.size(), " members (one share each when more than one)"));
  }
  PushChunk chunk = c;
  RETURN_IF_ERROR(ValidatePush(p->meta, chunk_elems_, c, &chunk.largest));
  AwaitCheckpointsBehind(c.step);
  absl::StatusOr<PushOutcome> outcome;
  std::optional<PartitionState::Rejected> refused;
  {
    absl::MutexLock lock(&p->mu);
    if (p->ended)
      return absl::AbortedError(absl::StrCat("job ", init_.job_id, " ended"));
    if (c.generation != p->generation)
      return StaleGeneration(init_.job_id, c.generation, p->generation);
    const int64_t before = p->rejected.count;
    outcome = aggregator_->Push(*p, members, chunk);
    if (p->rejected.count != before) refused = p->rejected;
  }
  if (refused.has_value()) NoteNonFinite(c.partition, *refused);
  if (!outcome.ok()) return outcome;
  if (c.stop && mode_ != Mode::kSync) stop_requested_ = true;
  if (*outcome == PushOutcome::kCompleted) {
    bool clock_moved = false;
    for (int member : members)
      clock_moved |= clocks_.PartitionDone(member, c.step, c.generation);
    if (clock_moved && mode_ != Mode::kSync) MaybeCheckpointByClock();
  }
  return outcome;
}

void JobShard::AwaitCheckpointsBehind(int64_t step) {
  if (checkpointer_ == nullptr) return;
  const int64_t every = init_.spec.checkpoint().every_steps();
  if (step - every < every) return;  // no file that old
  if (checkpointer_->AwaitFilesThrough(step - every, kCheckpointWaitLimit))
    return;
  std::cerr << "fulcrum-server: job " << init_.job_id << " shard "
            << init_.shard_index << ": a checkpoint of step <= "
            << step - every << " is not on disk after "
            << kCheckpointWaitLimit << "; step " << step
            << " goes on without it (until it is, a crash costs more than "
               "2 x checkpoint.every_steps)\n";
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
    checkpointer_->Add(step, id, SaveLocked(p, optimizer_.StateSlots()));
  }
}

void JobShard::NoteNonFinite(int32_t partition,
                             const PartitionState::Rejected& r) {
  NonFiniteUpdate note;
  note.step = r.step;
  note.partition = partition;
  note.largest = r.largest;
  {
    absl::MutexLock lock(&members_mu_);
    if (r.member >= 0 && r.member < static_cast<int>(workers_.size()))
      note.worker_id = workers_[r.member];
  }
  {
    absl::MutexLock lock(&nonfinite_mu_);
    note.count = ++nonfinite_.count;
    nonfinite_ = note;
  }
  if (init_.on_nonfinite) init_.on_nonfinite(note);
}

NonFiniteUpdate JobShard::LastNonFinite() const {
  absl::MutexLock lock(&nonfinite_mu_);
  return nonfinite_;
}

bool JobShard::HasVersion(int32_t partition, int64_t version,
                          int64_t generation) {
  PartitionState* p = Find(partition);
  if (p == nullptr) return false;
  absl::MutexLock lock(&p->mu);
  return p->version >= version && p->generation == generation;
}

std::optional<absl::Status> JobShard::VersionOutcome(
    const PartitionState& p, int32_t partition, int64_t version,
    int64_t generation, absl::Span<const int> members) const {
  if (p.generation != generation)
    return StaleGeneration(init_.job_id, generation, p.generation);
  if (p.version >= version) return absl::OkStatus();
  if (p.ended)
    return absl::AbortedError(absl::StrCat("job ", init_.job_id, " ended"));
  const PartitionState::Rejected& r = p.rejected;
  if (r.held && r.step < version &&
      std::find(members.begin(), members.end(), r.member) != members.end()) {
    return RefusedUpdateError(
        absl::StrCat(
            "push.data of step ", r.step, ": the update of partition ",
            partition, " would have made values non-finite and was not "
            "applied; this worker's push held the largest element (at least ",
            r.largest, ")"),
        r.step);
  }
  return std::nullopt;
}

absl::Status JobShard::WaitForVersion(int32_t partition, int64_t version,
                                      int64_t generation, absl::Time deadline,
                                      const std::function<bool()>& cancelled,
                                      absl::Span<const int> members) {
  PartitionState* p = Find(partition);
  if (p == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " not held here"));
  absl::MutexLock lock(&p->mu);
  for (;;) {
    if (std::optional<absl::Status> s =
            VersionOutcome(*p, partition, version, generation, members)) {
      return *s;
    }
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
}

std::optional<absl::Status> JobShard::OnVersion(
    int32_t partition, int64_t version, int64_t generation,
    absl::Span<const int> members, std::function<void(absl::Status)> done,
    uint64_t* id) {
  PartitionState* p = Find(partition);
  if (p == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " not held here"));
  absl::MutexLock lock(&p->mu);
  if (std::optional<absl::Status> s =
          VersionOutcome(*p, partition, version, generation, members)) {
    return s;
  }
  *id = p->waits.Add(
      // The members are copied only for a wait that is kept.
      [this, p, partition, version, generation,
       members = std::vector<int>(members.begin(), members.end())] {
        p->mu.AssertHeld();
        return VersionOutcome(*p, partition, version, generation, members);
      },
      std::move(done));
  return std::nullopt;
}

bool JobShard::CancelVersionWait(int32_t partition, uint64_t id) {
  PartitionState* p = Find(partition);
  if (p == nullptr) return false;
  absl::MutexLock lock(&p->mu);
  return p->waits.Cancel(id);
}

absl::Status JobShard::Read(int32_t partition, int64_t offset, int64_t n,
                            WireEncoding encoding, char* out,
                            int64_t* version, bool* stop) {
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
  EncodeRun(encoding, p->params.data() + offset, n, out);
  *version = p->version;
  *stop = p->stop || stop_requested_.load();
  return absl::OkStatus();
}

std::vector<JobShard::Stall> JobShard::Stalls(absl::Duration threshold) const {
  if (mode_ != Mode::kSync) return {};
  std::vector<Stall> stalls;
  const std::vector<std::string> names = workers();
  const absl::Time now = init_.env->Now();
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    if (p.ended || now - p.barrier.first_done < threshold) continue;
    Stall s{id, p.version, absl::ToDoubleSeconds(now - p.barrier.first_done),
            {}};
    for (int m = 0; m < p.tracker.members() && m < static_cast<int>(names.size());
         ++m) {
      if (!p.tracker.Complete(m)) s.waiting_for.push_back(names[m]);
    }
    stalls.push_back(std::move(s));
  }
  return stalls;
}

bool JobShard::Ledger(fulcrum::Ledger* out) const {
  PartitionState* p = Find(0);
  if (p == nullptr || !p->tracks_ledger) return false;
  absl::MutexLock lock(&p->mu);
  *out = p->ledger.entries();
  return true;
}

void JobShard::End() {
  DeferredCalls scope;  // OnVersion callbacks run after the locks
  ended_ = true;
  clocks_.End();
  embeddings_->End();
  for (auto& p : slots_) {
    if (p == nullptr) continue;
    absl::MutexLock lock(&p->mu);
    p->ended = true;
    p->Changed();
  }
}

}  // namespace fulcrum
