#include "worker/model/mlp.h"

#include <algorithm>

namespace fulcrum {

Mlp::Mlp(Backend* backend, const ParameterLayout& layout, int max_batch)
    : backend_(backend), max_batch_(max_batch) {
  // Tensors come in (weight [out, in], bias [out]) pairs.
  const auto& t = layout.tensors();
  sizes_.push_back(static_cast<int>(t[0].shape[1]));
  for (size_t i = 0; i + 1 < t.size(); i += 2) {
    sizes_.push_back(static_cast<int>(t[i].shape[0]));
    w_offset_.push_back(t[i].offset);
    b_offset_.push_back(t[i + 1].offset);
  }
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    const int n_in = sizes_[l], n_out = sizes_[l + 1];
    std::vector<int> starts = {0};
    for (const Partition& p : layout.partitions()) {
      const int64_t into = p.offset - w_offset_[l];
      if (into <= 0 || into >= int64_t{n_out} * n_in) continue;
      // Rows from floor(into / n_in) on hold the partition wholly.
      const int row = static_cast<int>(into / n_in);
      if (row > starts.back()) starts.push_back(row);
    }
    std::reverse(starts.begin(), starts.end());
    row_blocks_.push_back(std::move(starts));
  }
  for (size_t l = 1; l < sizes_.size(); ++l) {
    act_.push_back(
        backend_->Allocate(static_cast<int64_t>(max_batch) * sizes_[l]));
    dact_.push_back(
        backend_->Allocate(static_cast<int64_t>(max_batch) * sizes_[l]));
  }
}

Mlp::~Mlp() {
  for (float* p : act_) backend_->Free(p);
  for (float* p : dact_) backend_->Free(p);
}

const float* Mlp::Forward(const float* params, const float* x, int batch) {
  const int layers = static_cast<int>(w_offset_.size());
  const float* in = x;
  for (int l = 0; l < layers; ++l) {
    const int n_in = sizes_[l], n_out = sizes_[l + 1];
    // act = in [batch x n_in] * W^T [n_in x n_out] + b
    backend_->Gemm(false, true, batch, n_out, n_in, 1.0f, in,
                   params + w_offset_[l], 0.0f, act_[l]);
    backend_->AddBias(batch, n_out, params + b_offset_[l], act_[l]);
    if (l + 1 < layers)
      backend_->Relu(static_cast<int64_t>(batch) * n_out, act_[l]);
    in = act_[l];
  }
  return act_.back();
}

double Mlp::ForwardBackward(const float* params, const float* x,
                            const int32_t* labels, int batch, float* grads,
                            const GradientReady& ready) {
  const int layers = static_cast<int>(w_offset_.size());
  const float* logits = Forward(params, x, batch);
  const double loss = backend_->SoftmaxCrossEntropy(
      batch, classes(), logits, labels, 1.0f / batch, dact_.back());
  for (int l = layers - 1; l >= 0; --l) {
    const int n_in = sizes_[l], n_out = sizes_[l + 1];
    const float* in = l == 0 ? x : act_[l - 1];
    // The bias follows its weight in the flat vector: final first.
    backend_->BiasGrad(batch, n_out, dact_[l], grads + b_offset_[l]);
    if (ready) ready(b_offset_[l]);
    // dW [n_out x n_in] = dY^T [n_out x batch] * in [batch x n_in], rows
    // [first, end) at a time: dY's columns of those rows (stride n_out).
    int end = n_out;
    for (const int first : row_blocks_[l]) {
      const int64_t at = w_offset_[l] + int64_t{first} * n_in;
      backend_->GemmStrided(true, false, end - first, n_in, batch, 1.0f,
                            dact_[l] + first, n_out, in, n_in, 0.0f,
                            grads + at, n_in);
      if (ready) ready(at);
      end = first;
    }
    if (l > 0) {
      // dIn [batch x n_in] = dY [batch x n_out] * W [n_out x n_in], then ReLU'.
      backend_->Gemm(false, false, batch, n_in, n_out, 1.0f, dact_[l],
                     params + w_offset_[l], 0.0f, dact_[l - 1]);
      backend_->ReluGrad(static_cast<int64_t>(batch) * n_in, act_[l - 1],
                         dact_[l - 1]);
    }
  }
  return loss / batch;
}

int64_t Mlp::Evaluate(const float* params, const float* x,
                      const int32_t* labels, int batch, double* loss_sum) {
  const float* logits = Forward(params, x, batch);
  if (loss_sum != nullptr) {
    *loss_sum += backend_->SoftmaxCrossEntropy(batch, classes(), logits, labels,
                                               0.0f, dact_.back());
  }
  return backend_->CountCorrect(batch, classes(), logits, labels);
}

}  // namespace fulcrum
