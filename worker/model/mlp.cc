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
    std::vector<RowBlock> blocks;
    int end = n_out;
    for (auto it = starts.rbegin(); it != starts.rend(); ++it) {
      blocks.push_back({*it, end});
      end = *it;
    }
    row_blocks_.push_back(std::move(blocks));
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

void Mlp::FirstLayerRows(const float* params, const float* x, int batch,
                         int first, int end) {
  const int n_in = sizes_[0], n_out = sizes_[1];
  // act[:, first:end] = x [batch x n_in] * W[first:end]^T (stride n_out).
  backend_->GemmStrided(false, true, batch, end - first, n_in, 1.0f, x, n_in,
                        params + w_offset_[0] + int64_t{first} * n_in, n_in,
                        0.0f, act_[0] + first, n_out);
}

void Mlp::Prepare(const float* x, int batch) {
  prepared_x_ = x;
  prepared_batch_ = batch;
  block_missing_.clear();
  for (const RowBlock& b : row_blocks_[0])
    block_missing_.push_back(int64_t{b.end - b.first} * sizes_[0]);
}

void Mlp::Arrived(const float* params, int64_t offset, int64_t size) {
  if (prepared_x_ == nullptr) return;
  for (size_t i = 0; i < row_blocks_[0].size(); ++i) {
    const RowBlock& b = row_blocks_[0][i];
    const int64_t lo = w_offset_[0] + int64_t{b.first} * sizes_[0];
    const int64_t hi = w_offset_[0] + int64_t{b.end} * sizes_[0];
    const int64_t overlap = std::min(hi, offset + size) - std::max(lo, offset);
    if (overlap <= 0 || block_missing_[i] <= 0) continue;
    block_missing_[i] -= overlap;
    if (block_missing_[i] <= 0)
      FirstLayerRows(params, prepared_x_, prepared_batch_, b.first, b.end);
  }
}

void Mlp::Unprepare() { prepared_x_ = nullptr; }

int Mlp::prepared_rows() const {
  if (prepared_x_ == nullptr) return 0;
  int rows = 0;
  for (size_t i = 0; i < row_blocks_[0].size(); ++i) {
    const RowBlock& b = row_blocks_[0][i];
    if (block_missing_[i] <= 0) rows += b.end - b.first;
  }
  return rows;
}

const float* Mlp::Forward(const float* params, const float* x, int batch,
                          bool prepared) {
  const int layers = static_cast<int>(w_offset_.size());
  // What Arrived computed counts only for the input and batch it was for.
  const bool ahead =
      prepared && prepared_x_ == x && prepared_batch_ == batch;
  const float* in = x;
  for (int l = 0; l < layers; ++l) {
    const int n_in = sizes_[l], n_out = sizes_[l + 1];
    // act = in [batch x n_in] * W^T [n_in x n_out] + b
    if (l == 0 && ahead) {
      for (size_t i = 0; i < row_blocks_[0].size(); ++i) {
        const RowBlock& b = row_blocks_[0][i];
        if (block_missing_[i] > 0)
          FirstLayerRows(params, x, batch, b.first, b.end);
      }
    } else {
      backend_->Gemm(false, true, batch, n_out, n_in, 1.0f, in,
                     params + w_offset_[l], 0.0f, act_[l]);
    }
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
  const float* logits = Forward(params, x, batch, /*prepared=*/true);
  Unprepare();
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
    for (const RowBlock& b : row_blocks_[l]) {
      const int64_t at = w_offset_[l] + int64_t{b.first} * n_in;
      backend_->GemmStrided(true, false, b.end - b.first, n_in, batch, 1.0f,
                            dact_[l] + b.first, n_out, in, n_in, 0.0f,
                            grads + at, n_in);
      if (ready) ready(at);
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
  Unprepare();  // act_ is overwritten
  const float* logits = Forward(params, x, batch, /*prepared=*/false);
  if (loss_sum != nullptr) {
    *loss_sum += backend_->SoftmaxCrossEntropy(batch, classes(), logits, labels,
                                               0.0f, dact_.back());
  }
  return backend_->CountCorrect(batch, classes(), logits, labels);
}

}  // namespace fulcrum
