// A multi-layer perceptron (Linear -> ReLU -> ... -> Linear) with softmax
// cross-entropy, running on a Backend. Parameters and gradients are single
// flat buffers in ParameterLayout order, owned by the caller, so the data
// plane sends and receives them without any repacking.
#ifndef FULCRUM_WORKER_MODEL_MLP_H_
#define FULCRUM_WORKER_MODEL_MLP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "common/tensor/layout.h"
#include "worker/backend/backend.h"

namespace fulcrum {

class Mlp {
 public:
  // Called during backward each time a layer's gradients are complete:
  // grads[ready_from, total_size) are final for this step.
  using GradientReady = std::function<void(int64_t ready_from)>;

  // Activations are allocated once for batches of up to `max_batch` rows.
  // `backend` is not owned and must outlive the model.
  Mlp(Backend* backend, const ParameterLayout& layout, int max_batch);
  ~Mlp();
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  int inputs() const { return sizes_.front(); }
  int classes() const { return sizes_.back(); }

  // One training step's forward and backward pass over `batch` rows of x
  // (backend memory) and labels (host memory). Writes the gradient of the
  // mean loss into grads and returns the mean loss. `ready` is called as
  // soon as each partition of the layout is final: a layer's bias first,
  // then its weight in blocks of rows cut at the partition boundaries that
  // fall inside it (last block first), so that a large layer's partitions
  // go out one by one while the rest of it is computed - and are updated
  // by the shards meanwhile - instead of all at once at its end.
  // REQUIRES: 0 < batch <= max_batch.
  double ForwardBackward(const float* params, const float* x,
                         const int32_t* labels, int batch, float* grads,
                         const GradientReady& ready);

  // Forward only; returns the number of correct predictions and adds the
  // summed loss to *loss_sum when non-null.
  int64_t Evaluate(const float* params, const float* x, const int32_t* labels,
                   int batch, double* loss_sum);

 private:
  const float* Forward(const float* params, const float* x, int batch);

  Backend* const backend_;  // Not owned.
  const int max_batch_;
  std::vector<int> sizes_;         // [in, hidden..., classes]
  std::vector<int64_t> w_offset_;  // per layer, into the flat vector
  std::vector<int64_t> b_offset_;
  // Per layer, the first rows of the weight's gradient blocks, descending,
  // ending with 0 (a partition boundary inside the weight starts a block).
  std::vector<std::vector<int>> row_blocks_;
  std::vector<float*> act_;   // outputs of each layer, [max_batch x out]
  std::vector<float*> dact_;  // gradients w.r.t. those outputs
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_MODEL_MLP_H_
