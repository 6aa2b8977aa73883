// Server-side optimizers and learning-rate schedules. Optimizer state lives
// only on the shard that owns the partition; workers never see it.
#ifndef FULCRUM_SERVER_PS_OPTIMIZER_H_
#define FULCRUM_SERVER_PS_OPTIMIZER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "fulcrum/v1/job.pb.h"

namespace fulcrum {

struct LrSchedule {
  enum class Type { kConstant, kStep, kCosine };
  Type type = Type::kConstant;
  int64_t warmup_steps = 0;
  int64_t step_size = 1;
  double gamma = 1.0;
  int64_t total_steps = 1;
  double min_lr = 0.0;

  // Learning rate at 0-based step t for base rate `lr`.
  double At(double lr, int64_t t) const;
};

struct OptimizerConfig {
  enum class Type { kSgd, kMomentum, kNesterov, kAdam, kAdamW, kAverage };
  Type type = Type::kSgd;
  double lr = 0.01;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  LrSchedule schedule;

  // REQUIRES: spec validated (common/config/job_spec.h).
  static OptimizerConfig FromSpec(const v1::OptimizerSpec& spec);
  // State floats per parameter: momentum buffer (1), Adam moments (2), or 0.
  int StateSlots() const;
};

// One update of n parameters with the averaged gradient `grad` at 0-based
// step `step` (for the schedule); `updates` is how many updates this state
// has seen before, for Adam's bias correction. PyTorch semantics:
//   sgd       w -= lr (g + wd w)
//   momentum  g += wd w; v = mu v + g; w -= lr v
//   nesterov  g += wd w; v = mu v + g; w -= lr (g + mu v)
//   adam      g += wd w; m = b1 m + (1-b1) g; s = b2 s + (1-b2) g^2;
//             w -= lr m^ / (sqrt(s^) + eps), m^ = m/(1-b1^k), s^ = s/(1-b2^k)
//   adamw     w *= 1 - lr wd; then adam without the L2 term
//   average   w = g: the "parameters" are the averaged gradient, which each
//             worker's own optimizer applies (gradient-averaging mode)
// `state` holds StateSlots() * n floats, slot-major. The gradient is
// grad[i] * grad_scale (the shard's averaging, folded into this one pass).
// Returns false when a written value (parameter or state) is not finite:
// checked in the same pass, branch-free, so the caller can refuse the
// update without another pass over the parameters.
bool ApplyUpdate(const OptimizerConfig& config, int64_t step, int64_t updates,
                 const float* grad, float* w, float* state, int64_t n,
                 float grad_scale = 1.0f);
// Out of place: reads w_in/state_in, writes w_out/state_out (which may be
// the same buffers). The shard keeps the previous version this way, at no
// extra memory traffic, so that one sync step can be undone.
bool ApplyUpdate(const OptimizerConfig& config, int64_t step, int64_t updates,
                 const float* grad, const float* w_in, const float* state_in,
                 float* w_out, float* state_out, int64_t n,
                 float grad_scale = 1.0f);

// Buffer elements (running statistics, TensorSpec.buffer) take no optimizer
// step: w_out[i] = values[i] * scale over each [begin, end) of `ranges`,
// where `values` holds the pushed values (summed, or one member's). false
// when a written value is not finite.
bool SetBuffers(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                const float* values, float scale, float* w_out);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_OPTIMIZER_H_
