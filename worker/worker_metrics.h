// The worker's Prometheus metrics (docs/metrics.md). One instance per
// process, shared by every job it trains; per-job children are looked up
// once per job, so a step costs a few atomic adds.
#ifndef FULCRUM_WORKER_WORKER_METRICS_H_
#define FULCRUM_WORKER_WORKER_METRICS_H_

#include <string>

#include "common/metrics/metrics.h"

namespace fulcrum {

struct WorkerMetrics {
  explicit WorkerMetrics(metrics::Registry& r);

  // The children for one job.
  struct Job {
    metrics::Counter* steps;
    metrics::Counter* samples;
    metrics::Counter* push_bytes;
    metrics::Histogram* step_seconds;
    metrics::Histogram* compute_seconds;
    metrics::Histogram* comm_wait_seconds;
    metrics::Gauge* loss;
    metrics::Gauge* test_accuracy;
    metrics::Counter* rejoins;
    metrics::Counter* reconnects;
    metrics::Gauge* overlap;
    metrics::Counter* lease_wait_seconds;
  };
  Job ForJob(const std::string& job_id);

  metrics::Family<metrics::Counter>& steps;
  metrics::Family<metrics::Counter>& samples;
  metrics::Family<metrics::Counter>& push_bytes;
  metrics::Family<metrics::Histogram>& step_seconds;
  metrics::Family<metrics::Histogram>& compute_seconds;
  metrics::Family<metrics::Histogram>& comm_wait_seconds;
  metrics::Family<metrics::Gauge>& loss;
  metrics::Family<metrics::Gauge>& test_accuracy;
  metrics::Family<metrics::Counter>& rejoins;
  metrics::Family<metrics::Counter>& reconnects;
  metrics::Family<metrics::Gauge>& overlap;
  metrics::Family<metrics::Counter>& lease_wait_seconds;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKER_METRICS_H_
