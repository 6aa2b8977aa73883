#include "server/ps/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/tensor/finite.h"

namespace fulcrum {

double LrSchedule::At(double lr, int64_t t) const {
  double rate = lr;
  switch (type) {
    case Type::kConstant:
      break;
    case Type::kStep:
      rate = lr * std::pow(gamma, static_cast<double>(t / step_size));
      break;
    case Type::kCosine: {
      const double progress = static_cast<double>(std::min(t, total_steps)) /
                              static_cast<double>(total_steps);
      rate = min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
      break;
    }
  }
  if (t < warmup_steps)
    rate *= static_cast<double>(t + 1) / static_cast<double>(warmup_steps);
  return rate;
}

OptimizerConfig OptimizerConfig::FromSpec(const v1::OptimizerSpec& spec) {
  OptimizerConfig c;
  const std::string& t = spec.type();
  c.type = t == "momentum"   ? Type::kMomentum
           : t == "nesterov" ? Type::kNesterov
           : t == "adam"     ? Type::kAdam
           : t == "adamw"    ? Type::kAdamW
           : t == "average"  ? Type::kAverage
                             : Type::kSgd;
  c.lr = spec.lr();
  c.momentum = static_cast<float>(spec.momentum());
  c.weight_decay = static_cast<float>(spec.weight_decay());
  if (spec.has_beta1()) c.beta1 = static_cast<float>(spec.beta1());
  if (spec.has_beta2()) c.beta2 = static_cast<float>(spec.beta2());
  if (spec.has_eps()) c.eps = static_cast<float>(spec.eps());
  const v1::ScheduleSpec& s = spec.schedule();
  c.schedule.type = s.type() == "step"     ? LrSchedule::Type::kStep
                    : s.type() == "cosine" ? LrSchedule::Type::kCosine
                                           : LrSchedule::Type::kConstant;
  c.schedule.warmup_steps = s.warmup_steps();
  c.schedule.step_size = std::max<int64_t>(1, s.step_size());
  c.schedule.gamma = s.gamma();
  c.schedule.total_steps = std::max<int64_t>(1, s.total_steps());
  c.schedule.min_lr = s.min_lr();
  return c;
}

int OptimizerConfig::StateSlots() const {
  switch (type) {
    case Type::kMomentum:
    case Type::kNesterov:
      return 1;
    case Type::kAdam:
    case Type::kAdamW:
      return 2;
    default:
      return 0;
  }
}

bool ApplyUpdate(const OptimizerConfig& c, int64_t step, int64_t updates,
                 const float* grad, float* w, float* state, int64_t n,
                 float grad_scale) {
  return ApplyUpdate(c, step, updates, grad, w, state, w, state, n,
                     grad_scale);
}

bool ApplyUpdate(const OptimizerConfig& c, int64_t step, int64_t updates,
                 const float* grad, const float* w_in, const float* state_in,
                 float* w_out, float* state_out, int64_t n,
                 float grad_scale) {
  const float s = grad_scale;
  const float lr = static_cast<float>(c.schedule.At(c.lr, step));
  const float wd = c.weight_decay, mu = c.momentum;
  uint32_t bad = 0;
  switch (c.type) {
    case OptimizerConfig::Type::kAverage:  // the workers' optimizers apply it
      for (int64_t i = 0; i < n; ++i) {
        const float g = grad[i] * s;
        w_out[i] = g;
        bad |= NonFinite(g);
      }
      return Finite(bad);
    case OptimizerConfig::Type::kSgd:
      for (int64_t i = 0; i < n; ++i) {
        const float w = w_in[i];
        const float out = w - lr * (grad[i] * s + wd * w);
        w_out[i] = out;
        bad |= NonFinite(out);
      }
      return Finite(bad);
    case OptimizerConfig::Type::kMomentum:
      for (int64_t i = 0; i < n; ++i) {
        const float w = w_in[i];
        const float v = mu * state_in[i] + (grad[i] * s + wd * w);
        const float out = w - lr * v;
        state_out[i] = v;
        w_out[i] = out;
        bad |= NonFinite(out);  // v infinite: out is too (lr > 0)
      }
      return Finite(bad);
    case OptimizerConfig::Type::kNesterov:
      for (int64_t i = 0; i < n; ++i) {
        const float w = w_in[i];
        const float g = grad[i] * s + wd * w;
        const float v = mu * state_in[i] + g;
        const float out = w - lr * (g + mu * v);
        state_out[i] = v;
        w_out[i] = out;
        bad |= NonFinite(out);
      }
      return Finite(bad);
    case OptimizerConfig::Type::kAdam:
    case OptimizerConfig::Type::kAdamW: {
      const bool decoupled = c.type == OptimizerConfig::Type::kAdamW;
      const double k = static_cast<double>(updates + 1);
      const float correct1 = static_cast<float>(1.0 - std::pow(c.beta1, k));
      const float correct2 = static_cast<float>(1.0 - std::pow(c.beta2, k));
      const float step_size = lr / correct1;
      const float b1 = c.beta1, b2 = c.beta2, eps = c.eps;
      const float* m_in = state_in;
      const float* v_in = state_in + n;
      float* m_out = state_out;
      float* v_out = state_out + n;
      for (int64_t i = 0; i < n; ++i) {
        float g = grad[i] * s;
        float w = w_in[i];
        if (decoupled) {
          w *= 1.0f - lr * wd;
        } else {
          g += wd * w;
        }
        const float m = b1 * m_in[i] + (1.0f - b1) * g;
        const float v = b2 * v_in[i] + (1.0f - b2) * g * g;
        const float out = w - step_size * m / (std::sqrt(v / correct2) + eps);
        m_out[i] = m;
        v_out[i] = v;
        w_out[i] = out;
        // An infinite second moment leaves out finite (m / inf): checked
        // too; an infinite m makes v infinite.
        bad |= NonFinite(v) | NonFinite(out);
      }
      return Finite(bad);
    }
  }
  return Finite(bad);
}

bool SetBuffers(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                const float* values, float scale, float* w_out) {
  uint32_t bad = 0;
  for (const auto& [begin, end] : ranges) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = values[i] * scale;
      w_out[i] = v;
      bad |= NonFinite(v);
    }
  }
  return Finite(bad);
}

}  // namespace fulcrum
