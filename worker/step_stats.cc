#include "worker/step_stats.h"

#include <algorithm>

namespace fulcrum {
namespace {

double Millis(StepStats::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

StepStats::StepStats(WorkerMetrics::Job metrics, int64_t gradient_elems,
                     int element_bytes, v1::Progress* progress)
    : metrics_(metrics),
      gradient_bytes_(static_cast<double>(element_bytes) *
                      static_cast<double>(gradient_elems)),
      progress_(progress) {}

double StepStats::Smooth(double previous, double value) const {
  return first_step_ ? value : 0.95 * previous + 0.05 * value;
}

void StepStats::Loss(double loss) {
  loss_ = first_loss_ ? loss : 0.95 * loss_ + 0.05 * loss;
  first_loss_ = false;
}

void StepStats::Step(int64_t step, int64_t epoch, int64_t samples,
                     const Times& t) {
  v1::Progress& p = *progress_;
  const double compute_ms = Millis(t.computed - t.start);
  const double wait_ms = Millis(t.received - t.computed);
  p.set_step_compute_ms(Smooth(p.step_compute_ms(), compute_ms));
  p.set_step_wait_ms(Smooth(p.step_wait_ms(), wait_ms));
  // Overlap: the share of the communication (first push to the new
  // parameters) that happened while this worker was still computing.
  if (t.first_push != Clock::time_point()) {
    const double comm_ms = Millis(t.received - t.first_push);
    const double overlap =
        comm_ms > 0 ? std::clamp(1.0 - wait_ms / comm_ms, 0.0, 1.0) : 0.0;
    p.set_overlap(Smooth(p.overlap(), overlap));
    if (metrics_.overlap != nullptr) metrics_.overlap->Set(p.overlap());
  }
  first_step_ = false;
  if (metrics_.steps != nullptr) {
    metrics_.steps->Increment();
    metrics_.samples->Increment(static_cast<double>(samples));
    if (samples > 0) metrics_.push_bytes->Increment(gradient_bytes_);
    metrics_.compute_seconds->Observe(compute_ms / 1e3);
    metrics_.comm_wait_seconds->Observe(wait_ms / 1e3);
    metrics_.step_seconds->Observe((compute_ms + wait_ms) / 1e3);
    metrics_.loss->Set(loss_);
  }
  window_samples_ += samples;
  p.set_step(step + 1);
  p.set_epoch(static_cast<int32_t>(epoch));
  p.set_loss(loss_);
  p.set_samples_total(p.samples_total() + samples);
  const Clock::time_point now = Clock::now();
  const double secs = std::chrono::duration<double>(now - window_start_).count();
  if (secs >= 0.5) {
    p.set_samples_per_sec(window_samples_ / secs);
    window_start_ = now;
    window_samples_ = 0;
  }
}

}  // namespace fulcrum
