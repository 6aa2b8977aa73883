// A worker's step statistics - one of the Trainer's parts: the progress it
// reports (step, epoch, smoothed loss, compute and wait times, overlap,
// samples/s) and its Prometheus metrics.
//
// Thread safety: none; the training thread owns it.
#ifndef FULCRUM_WORKER_STEP_STATS_H_
#define FULCRUM_WORKER_STEP_STATS_H_

#include <chrono>
#include <cstdint>

#include "fulcrum/v1/coordinator.pb.h"
#include "worker/worker_metrics.h"

namespace fulcrum {

class StepStats {
 public:
  using Clock = std::chrono::steady_clock;
  struct Times {
    Clock::time_point start;       // the step began
    Clock::time_point computed;    // backward done, every push queued
    Clock::time_point received;    // the next parameters arrived
    Clock::time_point first_push;  // epoch: nothing pushed
  };

  // `progress` is not owned and must outlive it; the metrics' pointers are
  // null when the worker exports none.
  // element_bytes: of wire.gradients (the push bytes counted per step).
  StepStats(WorkerMetrics::Job metrics, int64_t gradient_elems,
            int element_bytes,
            v1::Progress* progress);

  // The loss of a step that had samples (smoothed, 0.95).
  void Loss(double loss);
  // Step `step` of epoch `epoch` trained `samples` samples in `t`.
  void Step(int64_t step, int64_t epoch, int64_t samples, const Times& t);

 private:
  // Exponential moving average: the first value as is, then 0.95 / 0.05.
  double Smooth(double previous, double value) const;

  const WorkerMetrics::Job metrics_;
  const double gradient_bytes_;
  v1::Progress* const progress_;  // Not owned.
  bool first_step_ = true;
  bool first_loss_ = true;
  double loss_ = 0;
  Clock::time_point window_start_ = Clock::now();
  int64_t window_samples_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_STEP_STATS_H_
