#include "server/ps/optimizer.h"

namespace fulcrum {

OptimizerConfig OptimizerConfig::FromSpec(const v1::OptimizerSpec& spec) {
  OptimizerConfig c;
  c.type = spec.type() == "momentum" ? Type::kMomentum : Type::kSgd;
  c.lr = static_cast<float>(spec.lr());
  c.momentum = static_cast<float>(spec.momentum());
  c.weight_decay = static_cast<float>(spec.weight_decay());
  return c;
}

void ApplyUpdate(const OptimizerConfig& c, const float* grad, float* w,
                 float* state, int64_t n) {
  const float lr = c.lr, wd = c.weight_decay, mu = c.momentum;
  if (c.type == OptimizerConfig::Type::kMomentum) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = grad[i] + wd * w[i];
      state[i] = mu * state[i] + g;
      w[i] -= lr * state[i];
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * (grad[i] + wd * w[i]);
}

}  // namespace fulcrum
