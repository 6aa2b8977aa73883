#include "worker/worker_metrics.h"

namespace fulcrum {

using metrics::LatencyBuckets;

WorkerMetrics::WorkerMetrics(metrics::Registry& r)
    : steps(r.AddCounter("fulcrum_worker_steps_total",
                         "Training steps finished.", {"job_id"})),
      samples(r.AddCounter("fulcrum_worker_samples_total",
                           "Training samples processed.", {"job_id"})),
      push_bytes(r.AddCounter("fulcrum_worker_push_bytes_total",
                              "Gradient payload bytes pushed to shards.",
                              {"job_id"})),
      step_seconds(r.AddHistogram(
          "fulcrum_worker_step_seconds",
          "Wall time of a training step (compute + communication wait).",
          {"job_id"}, LatencyBuckets())),
      compute_seconds(r.AddHistogram(
          "fulcrum_worker_compute_seconds",
          "Per step: data gathering, forward and backward (pushes overlap it).",
          {"job_id"}, LatencyBuckets())),
      comm_wait_seconds(r.AddHistogram(
          "fulcrum_worker_comm_wait_seconds",
          "Per step: time after backward spent waiting for the new parameters.",
          {"job_id"}, LatencyBuckets())),
      loss(r.AddGauge("fulcrum_worker_loss", "Training loss (moving average).",
                      {"job_id"})),
      test_accuracy(r.AddGauge(
          "fulcrum_worker_test_accuracy",
          "Latest test-set accuracy evaluated by this worker (rank 0).",
          {"job_id"})),
      rejoins(r.AddCounter(
          "fulcrum_worker_rejoins_total",
          "Times this worker re-joined its job at a new membership generation.",
          {"job_id"})),
      reconnects(r.AddCounter(
          "fulcrum_worker_stream_reconnects_total",
          "Data-plane streams re-opened after a broken connection.",
          {"job_id"})),
      overlap(r.AddGauge(
          "fulcrum_worker_overlap_ratio",
          "Share of the communication (first push to new parameters) hidden "
          "behind this worker's compute (moving average).",
          {"job_id"})),
      lease_wait_seconds(r.AddCounter(
          "fulcrum_worker_lease_wait_seconds_total",
          "Time spent waiting for a chunk lease from a coordinator that did "
          "not answer (no step is taken meanwhile).",
          {"job_id"})) {}

WorkerMetrics::Job WorkerMetrics::ForJob(const std::string& job_id) {
  return {&steps.WithLabels({job_id}),
          &samples.WithLabels({job_id}),
          &push_bytes.WithLabels({job_id}),
          &step_seconds.WithLabels({job_id}),
          &compute_seconds.WithLabels({job_id}),
          &comm_wait_seconds.WithLabels({job_id}),
          &loss.WithLabels({job_id}),
          &test_accuracy.WithLabels({job_id}),
          &rejoins.WithLabels({job_id}),
          &reconnects.WithLabels({job_id}),
          &overlap.WithLabels({job_id}),
          &lease_wait_seconds.WithLabels({job_id})};
}

}  // namespace fulcrum
