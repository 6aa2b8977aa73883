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

  // The next step's forward, started while its parameters still arrive
  // (the first layer, which backward finished last and the shards updated
  // last, is needed first: priority-based parameter propagation, as in P3).
  // Prepare(x, batch) names the next step's input (backend memory, which
  // must stay unchanged until that step); each Arrived(params, offset, size)
  // says that params[offset, offset + size) hold the next step's values and
  // computes the first layer's output for every block of its rows whose
  // weights have all arrived. The next ForwardBackward with the same x and
  // batch computes only the rest, with the same result; any other call
  // (or Unprepare) drops what was prepared. Host backends: Arrived runs
  // kernels on the caller's thread.
  void Prepare(const float* x, int batch);
  void Arrived(const float* params, int64_t offset, int64_t size);
  void Unprepare();
  // Rows of the first layer computed ahead (tests).
  int prepared_rows() const;

 private:
  // `prepared`: blocks of the first layer that Arrived computed are kept.
  const float* Forward(const float* params, const float* x, int batch,
                       bool prepared);
  // The first layer's rows [first, end) of act = x W^T into act_[0].
  void FirstLayerRows(const float* params, const float* x, int batch,
                      int first, int end);

  Backend* const backend_;  // Not owned.
  const int max_batch_;
  std::vector<int> sizes_;         // [in, hidden..., classes]
  std::vector<int64_t> w_offset_;  // per layer, into the flat vector
  std::vector<int64_t> b_offset_;
  // Rows [first, end) of a layer's weight: a partition boundary inside
  // the weight starts a block.
  struct RowBlock {
    int first, end;
  };
  // Per layer, its blocks from the last rows to the first.
  std::vector<std::vector<RowBlock>> row_blocks_;
  // The prepared step: its input, batch, and per block of the first layer
  // (row_blocks_[0]'s order) the weight elements still to arrive; a block
  // at <= 0 has arrived and its output is computed.
  const float* prepared_x_ = nullptr;
  int prepared_batch_ = 0;
  std::vector<int64_t> block_missing_;
  std::vector<float*> act_;   // outputs of each layer, [max_batch x out]
  std::vector<float*> dact_;  // gradients w.r.t. those outputs
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_MODEL_MLP_H_
