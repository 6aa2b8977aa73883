#include "server/ps/testing/local_tier.h"

#include <algorithm>

#include "common/status/status_macros.h"
#include "server/ps/local_channel.h"
#include "server/ps/local_row_channel.h"
#include "server/ps/parameter_shard.h"

namespace fulcrum::testing {

LocalTier::LocalTier(const std::string& job_id, const v1::JobSpec& spec,
                     std::vector<std::string> workers)
    : job_id_(job_id) {
  std::vector<ParameterShard*> raw;
  for (int s = 0; s < spec.shards(); ++s) {
    shards_.push_back(std::make_unique<ParameterShard>());
    raw.push_back(shards_.back().get());
    JobInit init{job_id, spec, s, spec.shards(), 1, workers};
    absl::Status st = shards_.back()->InitJob(init).status();
    if (status_.ok()) status_ = st;
  }
  channels_ = std::make_unique<LocalChannelFactory>(raw);
}

LocalTier::~LocalTier() = default;

ChannelFactory* LocalTier::channels() { return channels_.get(); }

std::unique_ptr<RowChannel> LocalTier::Rows(ChannelOptions options) {
  options.job_id = job_id_;
  std::vector<ParameterShard*> raw;
  for (auto& shard : shards_) raw.push_back(shard.get());
  return std::make_unique<LocalRowChannel>(options, std::move(raw));
}

absl::StatusOr<int64_t> LocalTier::Reconfigure(
    int64_t generation, const std::vector<std::string>& workers) {
  int64_t align = INT64_MAX;
  for (auto& shard : shards_) {
    ASSIGN_OR_RETURN(std::shared_ptr<JobShard> job, shard->Find(job_id_));
    ASSIGN_OR_RETURN(Adopted adopted,
                     job->Adopt(generation, workers, std::nullopt));
    align = std::min(align, adopted.min_version);
  }
  for (auto& shard : shards_) {
    ASSIGN_OR_RETURN(std::shared_ptr<JobShard> job, shard->Find(job_id_));
    RETURN_IF_ERROR(job->Align(generation, workers, align).status());
  }
  return align;
}

}  // namespace fulcrum::testing
