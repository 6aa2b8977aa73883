// JobShard's reconfiguration (membership changes and recovery), saved
// partitions and checkpoints.
#include <algorithm>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/concurrency/deferred_calls.h"
#include "common/status/status_macros.h"
#include "server/ps/job_shard.h"
#include "server/ps/partition_format.h"

namespace fulcrum {

absl::StatusOr<Adopted> JobShard::Adopt(
    int64_t generation, const std::vector<std::string>& workers,
    std::optional<int64_t> restore_step) {
  DeferredCalls scope;  // OnVersion callbacks run after the locks
  absl::MutexLock serial(&reconfigure_mu_);
  if (ended_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", init_.job_id, " has ended"));
  }
  RETURN_IF_ERROR(CheckMembers(workers));
  {
    absl::MutexLock lock(&members_mu_);
    if (generation < generation_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "generation ", generation, " does not follow job ", init_.job_id,
          "'s generation ", generation_, " on this shard"));
    }
  }
  if (restore_step.has_value()) RETURN_IF_ERROR(RestoreCheckpoint(*restore_step));
  // Gradient averaging keeps no weights on the shards: rank 0 of the new
  // generation uploads them (a joiner needs them).
  if (init_.spec.model().type() == "external" &&
      optimizer_.type == OptimizerConfig::Type::kAverage)
    AwaitValues();
  {
    absl::MutexLock lock(&members_mu_);
    generation_ = generation;
    workers_ = workers;
    serving_ = false;
  }
  const int members = static_cast<int>(workers.size());
  int64_t lo = INT64_MAX;
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    p.generation = generation;
    aggregator_->ResetStep(p, members);
    lo = std::min(lo, p.version);
    p.Changed();
  }
  if (mode_ != Mode::kSync) {  // clocks, not update counts
    if (restore_step.has_value()) {
      lo = *restore_step;  // every member resumes at the checkpoint
    } else {
      lo = clocks_.MinClock();
      if (lo == INT64_MAX) lo = clocks_.MaxClock();  // every member finished
    }
  }
  clocks_.Reset(members, 0, generation);
  embeddings_->ResetClocks(members, 0, generation);
  Adopted adopted;
  // -1: this shard holds no partition of the job (more shards than
  // partitions) and has no say in the version the round aligns to.
  adopted.min_version = ids_.empty() ? -1 : (lo == INT64_MAX ? 0 : lo);
  adopted.checkpoint_steps = CheckpointSteps();
  if (restore_step.has_value()) {
    for (const auto& t : embeddings_->tables())
      adopted.restored_rows.emplace_back(t->name(), t->stats().resident);
  }
  return adopted;
}

absl::StatusOr<Aligned> JobShard::Align(
    int64_t generation, const std::vector<std::string>& workers, int64_t to) {
  DeferredCalls scope;  // OnVersion callbacks run after the locks
  absl::MutexLock serial(&reconfigure_mu_);
  if (ended_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", init_.job_id, " has ended"));
  }
  RETURN_IF_ERROR(CheckMembers(workers));
  {
    absl::MutexLock lock(&members_mu_);
    if (generation != generation_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "generation ", generation, " is not job ", init_.job_id,
          "'s adopted generation ", generation_, " on this shard"));
    }
  }
  if (to < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("align_version must be >= 0, got ", to));
  }
  for (int32_t id : ids_) {  // all or nothing
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    RETURN_IF_ERROR(aggregator_->CheckAlign(p, to));
  }
  const int members = static_cast<int>(workers.size());
  Aligned aligned;
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    aggregator_->Align(p, to, members);
    if (p.tracks_ledger) {
      aligned.has_ledger = true;
      aligned.ledger = p.ledger.entries();
    }
  }
  aligned.initialized = initialized_;
  // The rows forget what the undone step pushed (its samples train again).
  if (absl::Status undo = embeddings_->Undo(to); !undo.ok()) {
    std::cerr << "fulcrum-server: job " << init_.job_id << " aligning to step "
              << to << ": " << undo.message() << "\n";
  }
  if (checkpointer_ != nullptr) checkpointer_->DropAfter(to);
  clocks_.Reset(members, to, generation);
  embeddings_->ResetClocks(members, to, generation);
  if (mode_ != Mode::kSync || rows_only_) {
    absl::MutexLock lock(&clock_checkpoint_mu_);
    clock_checkpoint_ = to;
  }
  absl::MutexLock lock(&members_mu_);
  serving_ = true;
  return aligned;
}

absl::StatusOr<std::string> JobShard::SavePartition(int32_t partition) const {
  PartitionState* p = Find(partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " is not held by this shard"));
  }
  absl::MutexLock lock(&p->mu);
  return SaveLocked(*p, optimizer_.StateSlots());
}

namespace {

// Replaces p's state with a decoded blob. REQUIRES: p.mu held.
void Install(PartitionState& p, const DecodedPartition& d,
             const Aggregator& aggregator) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::memcpy(p.params.data(), d.values, p.params.size() * sizeof(float));
  std::memcpy(p.state.data(), d.state, p.state.size() * sizeof(float));
  p.version = d.version;
  p.updates = d.updates;
  p.ledger.Reset(d.ledger);
  aggregator.Restored(p);
  p.Changed();
}

}  // namespace

absl::Status JobShard::RestorePartition(int32_t partition,
                                        std::string_view blob) {
  DeferredCalls scope;  // OnVersion callbacks run after the locks
  PartitionState* p = Find(partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", partition, " is not held by this shard"));
  }
  absl::MutexLock lock(&p->mu);
  ASSIGN_OR_RETURN(DecodedPartition d,
                   DecodePartition(blob, partition, p->meta.size,
                                   optimizer_.StateSlots()));
  Install(*p, d, *aggregator_);
  return absl::OkStatus();
}

absl::Status JobShard::RestoreInitial() {
  DeferredCalls scope;  // OnVersion callbacks run after the locks
  const bool external = init_.spec.model().type() == "external";
  if (external) AwaitValues();  // a member uploads them again
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    if (!external) {
      InitializeParameters(layout_, init_.spec.seed(), p.meta.offset,
                           p.meta.offset + p.meta.size, p.params.data());
    }
    std::fill(p.state.begin(), p.state.end(), 0.0f);
    p.version = 0;
    p.updates = 0;
    p.ledger.Reset({});
    aggregator_->Restored(p);
  }
  embeddings_->Clear();
  if (checkpointer_ != nullptr) checkpointer_->DropAfter(0);
  return absl::OkStatus();
}

absl::Status JobShard::RestoreCheckpoint(int64_t step) {
  DeferredCalls scope;  // OnVersion callbacks run after the locks
  if (step < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("restore_step must be >= 0, got ", step));
  if (step == 0) return RestoreInitial();
  const std::string path = CheckpointPath(checkpoint_dir(),
                                          init_.job_id, step, init_.shard_index);
  ASSIGN_OR_RETURN(CheckpointFile file, ReadCheckpoint(init_.env, path));
  // The embedding tables' rows ride along, keyed < 0 (one per table).
  const size_t tables = embeddings_->tables().size();
  if (file.job_id != init_.job_id || file.step != step ||
      file.shard != init_.shard_index ||
      file.partitions.size() != ids_.size() + tables) {
    return absl::DataLossError(absl::StrCat(
        path, " holds job ", file.job_id, " step ", file.step, " shard ",
        file.shard, " with ", file.partitions.size(),
        " partitions and tables; expected ", init_.job_id, " step ", step,
        " shard ", init_.shard_index, " with ", ids_.size(), " and ", tables));
  }
  // Decode every blob before changing anything: all or nothing. The
  // tables' differentials are made whole with the full save they name.
  absl::StatusOr<std::vector<SavedRows>> rows =
      embeddings_->Decode(file.partitions);
  if (rows.ok()) {
    rows = embeddings_->Resolve(
        *std::move(rows),
        [this](int64_t base)
            -> absl::StatusOr<std::vector<std::pair<int32_t, std::string>>> {
          ASSIGN_OR_RETURN(
              CheckpointFile f,
              ReadCheckpoint(init_.env,
                             CheckpointPath(checkpoint_dir(), init_.job_id,
                                            base, init_.shard_index)));
          return std::move(f.partitions);
        });
  }
  if (!rows.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", rows.status().message()));
  }
  std::vector<std::pair<PartitionState*, DecodedPartition>> decoded;
  for (const auto& [id, blob] : file.partitions) {
    if (id < 0) continue;  // a table's
    PartitionState* p = Find(id);
    if (p == nullptr)
      return absl::DataLossError(
          absl::StrCat(path, " holds partition ", id, ", not held here"));
    absl::StatusOr<DecodedPartition> d =
        DecodePartition(blob, id, p->meta.size, optimizer_.StateSlots());
    if (!d.ok())
      return absl::DataLossError(absl::StrCat(path, ": ", d.status().message()));
    decoded.emplace_back(p, std::move(*d));
  }
  for (auto& [p, d] : decoded) {
    absl::MutexLock lock(&p->mu);
    Install(*p, d, *aggregator_);
  }
  embeddings_->Restore(*rows, step);
  if (checkpointer_ != nullptr) checkpointer_->DropAfter(step);
  return absl::OkStatus();
}

void JobShard::AwaitValues() {
  initialized_ = ids_.empty();  // a shard without partitions has nothing due
  complete_partitions_ = 0;
  for (int32_t id : ids_) {
    PartitionState& p = *slots_[id];
    absl::MutexLock lock(&p.mu);
    p.uploaded.assign(p.num_chunks, 0);
    p.uploaded_count = 0;
  }
}

absl::Status JobShard::Initialize(const std::string& worker_id,
                                  int64_t generation, int32_t partition,
                                  int64_t offset, const char* data,
                                  size_t bytes) {
  DeferredCalls scope;  // OnVersion callbacks run after the locks
  RETURN_IF_ERROR(MemberIndex(worker_id, generation).status());
  PartitionState* p = Find(partition);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("initialize.partition ", partition,
                     " is not held by shard ", init_.shard_index, " of job ",
                     init_.job_id));
  }
  PushChunk c;
  c.partition = partition;
  c.offset = offset;
  c.samples = 1;
  c.data = Payload(data, bytes);
  if (absl::Status s = ValidatePush(p->meta, chunk_elems_, c); !s.ok()) {
    return absl::Status(s.code(), absl::StrReplaceAll(
                                      s.message(), {{"push.", "initialize."}}));
  }
  absl::MutexLock lock(&p->mu);
  if (initialized_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", init_.job_id, " already holds its values on shard ",
        init_.shard_index, "; they are not replaced"));
  }
  std::memcpy(p->params.data() + offset, data, bytes);
  const int64_t chunk = offset / chunk_elems_;
  if (p->uploaded[chunk]) return absl::OkStatus();  // a repeat
  p->uploaded[chunk] = 1;
  if (++p->uploaded_count < p->num_chunks) return absl::OkStatus();
  std::fill(p->state.begin(), p->state.end(), 0.0f);
  if (++complete_partitions_ == static_cast<int>(ids_.size()))
    initialized_ = true;
  return absl::OkStatus();
}

int64_t JobShard::LastCheckpoint() const {
  return checkpointer_ == nullptr ? -1 : checkpointer_->last_written();
}

std::vector<int64_t> JobShard::CheckpointSteps() const {
  if (checkpointer_ == nullptr) return {};
  return ListCheckpointSteps(init_.env, checkpoint_dir(),
                             init_.job_id, init_.shard_index);
}

void JobShard::FlushCheckpoints() {
  if (checkpointer_ != nullptr) checkpointer_->Flush();
}

}  // namespace fulcrum
