#include "server/ps/shard_collector.h"

namespace fulcrum {

void CollectShardState(const ParameterShard& shard, ShardMetrics* metrics) {
  const std::vector<std::string> ids = shard.JobIds();
  metrics->jobs.WithLabels().Set(static_cast<double>(ids.size()));
  for (const std::string& id : ids) {
    absl::StatusOr<std::shared_ptr<JobShard>> job = shard.Find(id);
    if (!job.ok()) continue;
    for (const auto& table : (*job)->embeddings().tables()) {
      metrics->TableState(id, table->name(), table->stats());
    }
  }
}

}  // namespace fulcrum
