// The parameter shard's Prometheus metrics (docs/metrics.md).
#ifndef FULCRUM_SERVER_PS_SHARD_METRICS_H_
#define FULCRUM_SERVER_PS_SHARD_METRICS_H_

#include <string>

#include "absl/synchronization/mutex.h"
#include "common/metrics/metrics.h"
#include "server/ps/embedding/row_store.h"

namespace fulcrum {

struct ShardMetrics {
  explicit ShardMetrics(metrics::Registry& r);

  // The children for one job, looked up once per stream.
  struct Job {
    metrics::Counter* push_bytes;
    metrics::Counter* pull_bytes;
    metrics::Histogram* aggregate_seconds;
    metrics::Histogram* barrier_wait_seconds;
    metrics::Histogram* staleness;
  };
  Job ForJob(const std::string& job_id);
  // Counts a rejected push; `reason` is the status code, e.g.
  // "invalid_argument".
  void Rejected(const std::string& reason);
  // Declares the job's checkpoint series (so they exist before the first
  // write).
  void CheckpointsEnabled(const std::string& job_id);
  // Records one checkpoint write attempt.
  void CheckpointWritten(const std::string& job_id, int64_t step,
                         double seconds, bool ok);

  // One embedding table's counters, looked up once per request.
  struct Table {
    metrics::Counter* pulled_rows;
    metrics::Counter* pushed_rows;
  };
  Table ForTable(const std::string& job_id, const std::string& table);
  // Exports a table's state (called by the scrape's collector; two
  // scrapes at once are serialized).
  void TableState(const std::string& job_id, const std::string& table,
                  const RowStore::Stats& stats);

  metrics::Family<metrics::Counter>& push_bytes;
  metrics::Family<metrics::Counter>& pull_bytes;
  metrics::Family<metrics::Histogram>& aggregate_seconds;
  metrics::Family<metrics::Histogram>& barrier_wait_seconds;
  metrics::Family<metrics::Histogram>& staleness;
  metrics::Family<metrics::Counter>& rejected_pushes;
  metrics::Family<metrics::Counter>& nonfinite_updates;
  metrics::Family<metrics::Gauge>& streams;
  metrics::Family<metrics::Counter>& shm_streams;
  metrics::Family<metrics::Counter>& group_members;
  // DeferredCalls::unscoped(), brought up to date by CollectShardState.
  metrics::Family<metrics::Counter>& deferred_unscoped;
  metrics::Family<metrics::Gauge>& jobs;
  metrics::Family<metrics::Histogram>& checkpoint_seconds;
  metrics::Family<metrics::Counter>& checkpoint_failures;
  metrics::Family<metrics::Gauge>& checkpoint_last_step;
  metrics::Family<metrics::Gauge>& embedding_rows;
  metrics::Family<metrics::Gauge>& embedding_bytes;
  metrics::Family<metrics::Gauge>& embedding_cut_rows;
  metrics::Family<metrics::Gauge>& embedding_undo_rows;
  metrics::Family<metrics::Counter>& embedding_undone;
  metrics::Family<metrics::Counter>& embedding_admitted;
  metrics::Family<metrics::Counter>& embedding_evicted;
  metrics::Family<metrics::Counter>& embedding_pending;
  metrics::Family<metrics::Counter>& embedding_pulled;
  metrics::Family<metrics::Counter>& embedding_pushed;

 private:
  absl::Mutex table_state_mu_;  // counters caught up from the tables' totals
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_SHARD_METRICS_H_
