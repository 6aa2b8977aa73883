#include "server/ps/parameter_shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/config/confined_path.h"
#include "common/status/status_macros.h"

namespace fulcrum {
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
    const JobInit& given) {
  JobInit init = given;
  if (!checkpoint_root_.empty() &&
      init.spec.checkpoint().every_steps() > 0) {
    ASSIGN_OR_RETURN(init.checkpoint_dir,
                     ResolveConfined(checkpoint_root_,
                                     init.spec.checkpoint().dir(),
                                     "checkpoint.dir"));
  }
  std::shared_ptr<JobShard> replaced;  // released outside the lock
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(init.job_id);
    if (it != jobs_.end() && it->second->ended()) {
      // Ended here (kept for export) but the coordinator places the job on
      // this shard again - e.g. it ended the job when its coordinator forgot
      // it for a while: a new incarnation replaces the ended one, which
      // otherwise refused every round ("job has ended") and wedged the job.
      ended_.erase(std::remove(ended_.begin(), ended_.end(), init.job_id),
                   ended_.end());
      replaced = std::move(it->second);
      jobs_.erase(it);
    } else if (it != jobs_.end()) {
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
        absl::StrCat("job '", job_id.substr(0, 64),
                     job_id.size() > 64 ? "...'" : "'",
                     " is not known to this shard"));
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
