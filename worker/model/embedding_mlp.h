// The recommender model of issue 14 (docs/embeddings.md), on a Backend:
//
//   categorical fields -> embedding bags (sums of rows of one table, `dim`
//                         wide, pulled from the shards for each batch)
//   dense features     -> bottom MLP (Linear + ReLU per layer; none: as is)
//   [bags..., bottom]  -> top MLP (Linear + ReLU ..., then Linear -> 1)
//   (+ with `dot`, every pair's dot product among the bags and the bottom's
//    output, DLRM's interaction)
//                      -> logistic loss against 0/1 labels
//
// The first top layer's weight is two tensors (the bags' columns and the
// bottom's), so that the concatenation is never materialised: two GEMMs
// add into one output. Dense parameters are one flat buffer in
// ParameterLayout order (EmbeddingMlpTensors), owned by the caller, like
// Mlp's; embedding rows live on the shards and come in per batch.
//
// Thread safety: one training thread, like the Backend it runs on.
#ifndef FULCRUM_WORKER_MODEL_EMBEDDING_MLP_H_
#define FULCRUM_WORKER_MODEL_EMBEDDING_MLP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor/embedding_mlp_tensors.h"
#include "common/tensor/layout.h"
#include "worker/backend/backend.h"

namespace fulcrum {

class EmbeddingMlp {
 public:
  // Called during backward each time a layer's gradients are complete:
  // grads[ready_from, total_size) are final for this step.
  using GradientReady = std::function<void(int64_t ready_from)>;

  // One batch. Pointers marked "backend" are in the backend's memory
  // (index memory for the int32 arrays); the maps come from a BagIndex
  // (bag_index.h) of size * fields bags, bag b = sample * fields + field.
  struct Batch {
    int size = 0;                         // samples, 0 < size <= max_batch
    const float* dense = nullptr;         // [size x dense], backend
    const float* labels = nullptr;        // [size], 0 or 1, host
    int rows = 0;                         // distinct rows
    const float* row_values = nullptr;    // [rows x dim], backend
    const int32_t* bag_offsets = nullptr;  // [size * fields + 1], backend
    const int32_t* bag_rows = nullptr;     // backend
    const int32_t* row_offsets = nullptr;  // [rows + 1], backend
    const int32_t* row_bags = nullptr;     // backend
  };

  // Checks that `layout` is EmbeddingMlpTensors(shape)'s (INVALID_ARGUMENT
  // naming the first tensor that differs) and allocates activations for
  // batches of up to `max_batch` samples (the backend's status() tells
  // whether that worked). `backend` is not owned and must outlive it.
  static absl::StatusOr<std::unique_ptr<EmbeddingMlp>> Create(
      Backend* backend, const ParameterLayout& layout,
      const EmbeddingMlpShape& shape, int max_batch);
  ~EmbeddingMlp();
  EmbeddingMlp(const EmbeddingMlp&) = delete;
  EmbeddingMlp& operator=(const EmbeddingMlp&) = delete;

  const EmbeddingMlpShape& shape() const { return shape_; }

  // One training step: writes the gradient of the mean loss into grads (the
  // dense parameters, backend) and row_grads ([rows x dim], backend: one
  // summed gradient per distinct row) and returns the mean loss.
  double ForwardBackward(const float* params, const Batch& batch,
                         float* grads, float* row_grads,
                         const GradientReady& ready);

  // Forward only: the batch's logits into `logits` (host, batch.size).
  void Predict(const float* params, const Batch& batch, float* logits);

 private:
  struct Layer {
    int in = 0, out = 0;
    int64_t weight = 0, bias = 0;  // offsets into the flat vector
    float* act = nullptr;          // [max_batch x out]
    float* dact = nullptr;         // the loss's gradient w.r.t. act
  };
  EmbeddingMlp(Backend* backend, EmbeddingMlpShape shape, int max_batch);
  const float* Forward(const float* params, const Batch& b);

  Backend* const backend_;  // Not owned.
  const EmbeddingMlpShape shape_;
  const int max_batch_;
  std::vector<Layer> bottom_;
  std::vector<Layer> top_;  // top_[0].weight: the bags' columns
  int64_t top0_dense_weight_ = 0;
  int64_t top0_interaction_weight_ = 0;  // dot only
  float* dots_ = nullptr;   // [max_batch x pairs], dot only
  float* ddots_ = nullptr;
  float* bags_ = nullptr;   // [max_batch x fields*dim]
  float* dbags_ = nullptr;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_MODEL_EMBEDDING_MLP_H_
