// The parameter shard's Prometheus metrics (docs/metrics.md).
#ifndef FULCRUM_SERVER_PS_SHARD_METRICS_H_
#define FULCRUM_SERVER_PS_SHARD_METRICS_H_

#include <string>

#include "common/metrics/metrics.h"

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

  metrics::Family<metrics::Counter>& push_bytes;
  metrics::Family<metrics::Counter>& pull_bytes;
  metrics::Family<metrics::Histogram>& aggregate_seconds;
  metrics::Family<metrics::Histogram>& barrier_wait_seconds;
  metrics::Family<metrics::Histogram>& staleness;
  metrics::Family<metrics::Counter>& rejected_pushes;
  metrics::Family<metrics::Counter>& nonfinite_updates;
  metrics::Family<metrics::Gauge>& streams;
  metrics::Family<metrics::Gauge>& jobs;
  metrics::Family<metrics::Histogram>& checkpoint_seconds;
  metrics::Family<metrics::Counter>& checkpoint_failures;
  metrics::Family<metrics::Gauge>& checkpoint_last_step;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_SHARD_METRICS_H_
