// Coordinator: the shards' calls - registration and heartbeats with each
// job's report (checkpoints, ledger, staleness, stalls, refused non-finite
// updates). Checked before any change, planned under the lock.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/confined_path.h"
#include "common/config/job_spec.h"
#include "common/config/model_layout.h"
#include "common/status/status_macros.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/echo.h"
#include "server/coordinator/job_status_view.h"

namespace fulcrum {

absl::StatusOr<v1::RegisterShardResponse> Coordinator::RegisterShard(
    const v1::RegisterShardRequest& request) {
  if (request.address().empty() ||
      request.address().find(':') == std::string::npos ||
      request.address().size() > 261) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address must be host:port, got '", request.address().substr(0, 64),
        "'"));
  }
  if (request.memory_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_bytes must be >= 0, got ", request.memory_bytes()));
  }
  v1::RegisterShardResponse response;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    // A shard registering at a live member's address is refused (anyone
    // could claim it); once that lease ran out it is the member restarted.
    if (ShardMember* old = members_.ShardAt(request.address());
        old != nullptr &&
        options_.env->Now() - old->last_heartbeat < options_.lease) {
      return absl::FailedPreconditionError(absl::StrCat(
          "address ", request.address().substr(0, 64), " is served by live "
          "shard ", old->id, "; a restarted shard registers once its lease "
          "(--lease_ms) has run out"));
    }
    if (ShardMember* old = members_.ShardAt(request.address())) {
      const std::string id = old->id;
      members_.RemoveShard(id);
      std::cerr << "fulcrum-coordinator: shard " << id << " at "
                << request.address() << " restarted\n";
      LoseShard(id);
    }
    bool persist = false;
    ShardMember& s =
        members_.AddShard(request.address(), options_.env->Now(), &persist);
    s.memory_bytes = request.memory_bytes();
    if (persist) ticket = PersistCounters();
    response.set_shard_id(s.id);
  }
  Sync(ticket).IgnoreError();
  SetTimings(&response);
  return response;
}

void Coordinator::ShardBack(const std::string& id) {
  std::cerr << "fulcrum-coordinator: shard " << id
            << " is back after its lease ran out\n";
  for (auto& [job_id, job] : jobs_) {
    if (!job->running()) continue;
    for (int i = 0; i < job->status.shards_size(); ++i) {
      if (job->status.shards(i) != id || !job->next.missing_shards.count(i))
        continue;
      job->next.missing_shards.erase(i);
      job->rejoin_until = options_.env->Now() + RejoinWait();
      AddEvent(*job, "rejoined", id);
      // Its state is intact: a restore is needed only while another shard
      // is still missing or a replacement starts empty.
      if (job->next.missing_shards.empty() && job->next.fresh_shards.empty()) {
        job->next.restore = false;
        job->next.force = true;
        job->status.set_message("");
      }
    }
  }
}

void Coordinator::TakeNonFinite(Job& job, const std::string& shard_id,
                                const v1::NonFiniteUpdates& n, Effects* e) {
  int64_t& seen = job.nonfinite_seen[shard_id];
  if (n.count() <= seen) return;
  seen = n.count();
  if (!job.running()) return;
  const std::string what = absl::StrCat(
      "step ", n.step(), ": the update of partition ", n.partition(),
      " would have made values non-finite and was not applied (largest "
      "gradient element at least ", n.largest(), " from ", n.worker_id(), ")");
  std::cerr << "fulcrum-coordinator: job " << job.id() << " " << what << "\n";
  AddEvent(job, "nonfinite", n.worker_id(), n.step());
  if (job.spec().optimizer().on_nonfinite() == "fail_job") {
    Finish(job, v1::FAILED,
           absl::StrCat(what, " (optimizer.on_nonfinite: fail_job)"), e);
  }
}

void Coordinator::TakeShardStats(const std::string& shard_id,
                                 const v1::ShardJobStats& stats, Effects* e) {
  Job* job = FindJob(stats.job_id());
  if (job == nullptr) return;
  const auto& shards = job->status.shards();
  const int index = static_cast<int>(
      std::find(shards.begin(), shards.end(), shard_id) - shards.begin());
  if (index < shards.size()) {
    if (stats.has_nonfinite())
      TakeNonFinite(*job, shard_id, stats.nonfinite(), e);
    job->checkpoint_steps[index].assign(stats.checkpoint_steps().begin(),
                                        stats.checkpoint_steps().end());
    if (stats.checkpoints_nothing()) {
      job->checkpoints_nothing.insert(index);
    } else {
      job->checkpoints_nothing.erase(index);
    }
    if (job->external() && stats.generation() == job->status.generation()) {
      if (stats.initialized()) {
        job->awaiting_values.erase(index);
      } else {
        job->awaiting_values.insert(index);
      }
    }
    if (stats.has_ledger() && stats.generation() == job->status.generation()) {
      job->ledger.clear();
      for (const v1::LedgerEntry& e : stats.ledger()) job->ledger[e.chunk()] = e;
    }
  }
  job->staleness[shard_id] = stats.staleness();
  job->stalls[shard_id].assign(stats.stalls().begin(), stats.stalls().end());
}

absl::StatusOr<v1::ShardHeartbeatResponse> Coordinator::ShardHeartbeat(
    const v1::ShardHeartbeatRequest& request) {
  Effects e;
  absl::StatusOr<v1::ShardHeartbeatResponse> response = ShardBeat(request, &e);
  Apply(e);
  return response;
}

absl::StatusOr<v1::ShardHeartbeatResponse> Coordinator::ShardBeat(
    const v1::ShardHeartbeatRequest& request, Effects* e) {
  absl::MutexLock lock(&mu_);
  ShardMember* s = members_.FindShard(request.shard_id());
  if (s == nullptr) {
    s = members_.ReadoptShard(request.shard_id(), request.address(),
                              options_.env->Now());
    if (s != nullptr) ShardBack(s->id);
  }
  if (s == nullptr && members_.Adoptable(request.shard_id(), "s-") &&
      !request.address().empty()) {
    s = &members_.AdoptShard(request.shard_id(), request.address());
    s->memory_bytes = request.memory_bytes();
    std::cerr << "fulcrum-coordinator: re-adopted shard " << s->id << " at "
              << s->address << "\n";
  }
  if (s == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("shard_id '", Id(request.shard_id()),
                     "' is not registered (lease expired?): register again"));
  }
  s->last_heartbeat = options_.env->Now();
  for (const v1::ShardJobStats& stats : request.jobs())
    TakeShardStats(s->id, stats, e);
  v1::ShardHeartbeatResponse response;
  for (const auto& [id, job] : jobs_) {
    const auto& shards = job->status.shards();
    if (job->phase != JobPhase::kEnded &&
        std::find(shards.begin(), shards.end(), s->id) != shards.end()) {
      response.add_active_jobs(id);
    }
  }
  return response;
}

}  // namespace fulcrum
