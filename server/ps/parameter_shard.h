// All jobs on one shard process: creates a job's partitions (InitJob), finds
// them, ends them and forgets them, keeping the parameters of the last
// kKeepEnded ended jobs readable for export.
//
// Thread safety: every method is safe to call concurrently.
#ifndef FULCRUM_SERVER_PS_PARAMETER_SHARD_H_
#define FULCRUM_SERVER_PS_PARAMETER_SHARD_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/ps/job_shard.h"

namespace fulcrum {

class ParameterShard {
 public:
  static constexpr size_t kKeepEnded = 8;

  // Checkpoint files go under `checkpoint_root` (fulcrum-server
  // --checkpoint_root): a job's checkpoint.dir is resolved in it and may
  // not lead out of it (common/config/confined_path.h). Empty: checkpoint.dir
  // as given (unit tests).
  explicit ParameterShard(std::string checkpoint_root = "")
      : checkpoint_root_(std::move(checkpoint_root)) {}

  // Creates the job's partitions, or confirms an identical earlier InitJob.
  // A job that ended here is replaced by a new one.
  // FAILED_PRECONDITION if the job exists with another spec or placement;
  // INVALID_ARGUMENT naming checkpoint.dir when it leads out of the root.
  absl::StatusOr<std::shared_ptr<JobShard>> InitJob(const JobInit& init);
  // NOT_FOUND if unknown.
  absl::StatusOr<std::shared_ptr<JobShard>> Find(
      const std::string& job_id) const;
  // Ends the job's waits and pushes. Its parameters stay readable (Pull)
  // until ForgetJob, or until kKeepEnded later jobs have ended. Unknown or
  // already ended jobs are fine (idempotent).
  void EndJob(const std::string& job_id);
  void ForgetJob(const std::string& job_id);
  std::vector<std::string> JobIds() const;

 private:
  const std::string checkpoint_root_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<JobShard>> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ended_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_PARAMETER_SHARD_H_
