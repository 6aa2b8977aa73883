// Server-side optimizers. Optimizer state lives only on the shard that owns
// the partition; workers never see it.
#ifndef FULCRUM_SERVER_PS_OPTIMIZER_H_
#define FULCRUM_SERVER_PS_OPTIMIZER_H_

#include <cstdint>

#include "fulcrum/v1/job.pb.h"

namespace fulcrum {

struct OptimizerConfig {
  enum class Type { kSgd, kMomentum };
  Type type = Type::kSgd;
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;

  static OptimizerConfig FromSpec(const v1::OptimizerSpec& spec);
  // Number of state floats per parameter (momentum buffer or none).
  int StateSlots() const { return type == Type::kMomentum ? 1 : 0; }
};

// One update of n parameters with the averaged gradient `grad`, with PyTorch
// torch.optim.SGD semantics (dampening 0, not Nesterov):
//   g = grad + weight_decay * w
//   v = momentum * v + g          (kMomentum; v starts at 0)
//   w = w - lr * (v or g)
// `state` holds StateSlots() * n floats.
void ApplyUpdate(const OptimizerConfig& config, const float* grad, float* w,
                 float* state, int64_t n);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_OPTIMIZER_H_
