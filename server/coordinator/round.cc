#include "server/coordinator/round.h"

#include <algorithm>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status/payloads.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

// `s` with the shard's address in front of its message.
absl::Status AtShard(const std::string& address, const absl::Status& s) {
  return Prefixed(absl::StrCat("shard ", address), s);
}

v1::ReconfigureRequest Phase1(const RoundPlan& plan) {
  v1::ReconfigureRequest request;
  request.set_job_id(plan.job_id);
  request.set_generation(plan.generation);
  for (const std::string& w : plan.workers) request.add_workers(w);
  request.set_align_version(-1);
  return request;
}

absl::Status InitFreshShards(const RoundPlan& plan, ShardControl* shards) {
  for (const auto& [address, request] : plan.inits) {
    absl::Status s = shards->InitJob(address, request);
    // Already there (a retried round): the Reconfigure below sets it up.
    if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition)
      return AtShard(address, s);
  }
  return absl::OkStatus();
}

// Which checkpoints every shard has on disk now (heartbeats lag; shards
// with nothing of the job to checkpoint aside): the newest of them that has
// not failed to load (0: none, the initial parameters).
absl::StatusOr<int64_t> ProbeRestoreStep(const RoundPlan& plan,
                                         ShardControl* shards) {
  const v1::ReconfigureRequest request = Phase1(plan);
  std::set<int64_t> common;
  bool first = true;
  for (size_t i = 0; i < plan.addresses.size(); ++i) {
    absl::StatusOr<v1::ReconfigureResponse> r =
        shards->Reconfigure(plan.addresses[i], request);
    if (!r.ok()) return AtShard(plan.addresses[i], r.status());
    // A shard with nothing of the job to checkpoint has no say.
    if (r->checkpoints_nothing()) continue;
    std::set<int64_t> here(r->checkpoint_steps().begin(),
                           r->checkpoint_steps().end());
    if (first) {
      common = std::move(here);
      first = false;
      continue;
    }
    for (auto it = common.begin(); it != common.end();)
      it = here.count(*it) ? std::next(it) : common.erase(it);
  }
  for (auto it = common.rbegin(); it != common.rend(); ++it) {
    if (!plan.bad_checkpoints.count(*it)) return *it;
  }
  return 0;
}

// Phase 1 on every shard; the lowest version any reported.
absl::StatusOr<int64_t> Adopt(const RoundPlan& plan, int64_t restore_step,
                              ShardControl* shards) {
  v1::ReconfigureRequest request = Phase1(plan);
  if (plan.restore) {
    request.set_restore(true);
    request.set_restore_step(restore_step);
  }
  int64_t align = INT64_MAX;
  for (const std::string& address : plan.addresses) {
    absl::StatusOr<v1::ReconfigureResponse> r =
        shards->Reconfigure(address, request);
    if (!r.ok()) {
      absl::Status s = AtShard(address, r.status());
      if (plan.restore && restore_step > 0 &&
          (s.code() == absl::StatusCode::kDataLoss ||
           s.code() == absl::StatusCode::kNotFound)) {
        s.SetPayload(kBadCheckpointPayload,
                     absl::Cord(absl::StrCat(restore_step)));
      }
      return s;
    }
    // -1: the shard holds no partition (more shards than partitions).
    if (r->min_version() >= 0) align = std::min(align, r->min_version());
  }
  return align == INT64_MAX ? 0 : align;
}

// Phase 2 on every shard: the ledger of the one holding partition 0, and
// which shards wait for values.
absl::Status Align(const RoundPlan& plan, ShardControl* shards,
                   RoundResult* result) {
  v1::ReconfigureRequest request = Phase1(plan);
  request.set_align_version(result->align_version);
  for (size_t i = 0; i < plan.addresses.size(); ++i) {
    absl::StatusOr<v1::ReconfigureResponse> r =
        shards->Reconfigure(plan.addresses[i], request);
    if (!r.ok()) return AtShard(plan.addresses[i], r.status());
    if (r->has_ledger()) {
      for (const v1::LedgerEntry& e : r->ledger())
        result->ledger[e.chunk()] = e;
    }
    if (!r->initialized()) result->awaiting_values.insert(static_cast<int>(i));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RoundResult> RunRound(const RoundPlan& plan,
                                     ShardControl* shards) {
  RETURN_IF_ERROR(InitFreshShards(plan, shards));
  RoundResult result;
  if (plan.restore) {
    ASSIGN_OR_RETURN(result.restore_step, ProbeRestoreStep(plan, shards));
  }
  ASSIGN_OR_RETURN(result.align_version,
                   Adopt(plan, result.restore_step, shards));
  RETURN_IF_ERROR(Align(plan, shards, &result));
  return result;
}

int64_t BadCheckpoint(const absl::Status& status) {
  const auto payload = status.GetPayload(kBadCheckpointPayload);
  int64_t step = -1;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &step))
    return -1;
  return step;
}

}  // namespace fulcrum
