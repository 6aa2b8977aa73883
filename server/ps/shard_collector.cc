#include "server/ps/shard_collector.h"

#include "absl/synchronization/mutex.h"
#include "common/concurrency/deferred_calls.h"

namespace fulcrum {

void CollectShardState(const ParameterShard& shard, ShardMetrics* metrics) {
  {
    // The count is the process's; only this collector moves the counter
    // (under a lock: scrapes may come at once).
    static absl::Mutex mu(absl::kConstInit);
    absl::MutexLock lock(&mu);
    metrics::Counter& unscoped = metrics->deferred_unscoped.WithLabels();
    const double now = static_cast<double>(DeferredCalls::unscoped());
    if (now > unscoped.Value()) unscoped.Increment(now - unscoped.Value());
  }
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
