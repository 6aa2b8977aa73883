#include "worker/model/embedding_mlp.h"

#include "absl/strings/str_cat.h"

namespace fulcrum {
EmbeddingMlp::EmbeddingMlp(Backend* backend, EmbeddingMlpShape shape,
                           int max_batch)
    : backend_(backend), shape_(std::move(shape)), max_batch_(max_batch) {}

absl::StatusOr<std::unique_ptr<EmbeddingMlp>> EmbeddingMlp::Create(
    Backend* backend, const ParameterLayout& layout,
    const EmbeddingMlpShape& shape, int max_batch) {
  auto want = EmbeddingMlpTensors(shape);
  if (!want.ok()) return want.status();
  const auto& have = layout.tensors();
  if (have.size() != want->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the layout has ", have.size(), " tensors; an embedding_mlp of this "
        "shape has ", want->size()));
  }
  for (size_t i = 0; i < have.size(); ++i) {
    if (have[i].name != (*want)[i].name || have[i].shape != (*want)[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layout tensor ", i, " ('", have[i].name,
          "') is not the embedding_mlp's '", (*want)[i].name, "'"));
    }
  }
  if (max_batch < 1) return absl::InvalidArgumentError("max_batch must be >= 1");
  std::unique_ptr<EmbeddingMlp> m(new EmbeddingMlp(backend, shape, max_batch));
  size_t t = 0;
  const auto alloc = [&](int width) {
    return backend->Allocate(int64_t{max_batch} * width);
  };
  int in = shape.dense;
  for (int width : shape.bottom) {
    m->bottom_.push_back({in, width, have[t].offset, have[t + 1].offset,
                          alloc(width), alloc(width)});
    t += 2;
    in = width;
  }
  const int bags = shape.fields * shape.dim;
  const int out0 = shape.top.empty() ? 1 : shape.top[0];
  const int bias0 = shape.dot ? 3 : 2;
  m->top_.push_back({bags, out0, have[t].offset, have[t + bias0].offset,
                     alloc(out0), alloc(out0)});
  m->top0_dense_weight_ = have[t + 1].offset;
  if (shape.dot) {
    m->top0_interaction_weight_ = have[t + 2].offset;
    m->dots_ = alloc(shape.pairs());
    m->ddots_ = alloc(shape.pairs());
  }
  t += bias0 + 1;
  for (size_t l = 1; l <= shape.top.size(); ++l) {
    const int out = l < shape.top.size() ? shape.top[l] : 1;
    m->top_.push_back({shape.top[l - 1], out, have[t].offset,
                       have[t + 1].offset, alloc(out), alloc(out)});
    t += 2;
  }
  m->bags_ = alloc(bags);
  m->dbags_ = alloc(bags);
  return m;
}

EmbeddingMlp::~EmbeddingMlp() {
  for (auto* layers : {&bottom_, &top_}) {
    for (Layer& l : *layers) {
      backend_->Free(l.act);
      backend_->Free(l.dact);
    }
  }
  backend_->Free(bags_);
  backend_->Free(dbags_);
  if (dots_ != nullptr) backend_->Free(dots_);
  if (ddots_ != nullptr) backend_->Free(ddots_);
}

const float* EmbeddingMlp::Forward(const float* params, const Batch& b) {
  const int n = b.size;
  const float* bottom_out = b.dense;
  for (Layer& l : bottom_) {
    // act = in [n x in] * W^T [in x out] + bias, then ReLU
    backend_->Gemm(false, true, n, l.out, l.in, 1.0f, bottom_out,
                   params + l.weight, 0.0f, l.act);
    backend_->AddBias(n, l.out, params + l.bias, l.act);
    backend_->Relu(static_cast<int64_t>(n) * l.out, l.act);
    bottom_out = l.act;
  }
  const int bottom_width = bottom_.empty() ? shape_.dense : bottom_.back().out;
  backend_->SegmentSum(n * shape_.fields, shape_.dim, b.bag_offsets,
                       b.bag_rows, b.row_values, bags_);
  const float* in = bags_;
  for (size_t i = 0; i < top_.size(); ++i) {
    Layer& l = top_[i];
    backend_->Gemm(false, true, n, l.out, l.in, 1.0f, in, params + l.weight,
                   0.0f, l.act);
    if (i == 0) {  // + bottom [n x bottom_width] * W_dense^T
      backend_->Gemm(false, true, n, l.out, bottom_width, 1.0f, bottom_out,
                     params + top0_dense_weight_, 1.0f, l.act);
      if (shape_.dot) {  // + dots [n x pairs] * W_interaction^T
        backend_->PairDots(n, shape_.fields + 1, shape_.dim, bags_,
                           bottom_out, dots_);
        backend_->Gemm(false, true, n, l.out, shape_.pairs(), 1.0f, dots_,
                       params + top0_interaction_weight_, 1.0f, l.act);
      }
    }
    backend_->AddBias(n, l.out, params + l.bias, l.act);
    if (i + 1 < top_.size())
      backend_->Relu(static_cast<int64_t>(n) * l.out, l.act);
    in = l.act;
  }
  return top_.back().act;
}

double EmbeddingMlp::ForwardBackward(const float* params, const Batch& b,
                                     float* grads, float* row_grads,
                                     const GradientReady& ready) {
  const int n = b.size;
  const float* logits = Forward(params, b);
  const double loss = backend_->SigmoidCrossEntropy(
      n, logits, b.labels, 1.0f / n, top_.back().dact);
  const float* bottom_out = bottom_.empty() ? b.dense : bottom_.back().act;
  const int bottom_width = bottom_.empty() ? shape_.dense : bottom_.back().out;
  for (int i = static_cast<int>(top_.size()) - 1; i >= 0; --i) {
    Layer& l = top_[i];
    const float* in = i == 0 ? bags_ : top_[i - 1].act;
    // dW [out x in] = dY^T [out x n] * in [n x in]
    backend_->Gemm(true, false, l.out, l.in, n, 1.0f, l.dact, in, 0.0f,
                   grads + l.weight);
    backend_->BiasGrad(n, l.out, l.dact, grads + l.bias);
    float* din = i == 0 ? dbags_ : top_[i - 1].dact;
    // dIn [n x in] = dY [n x out] * W [out x in]
    backend_->Gemm(false, false, n, l.in, l.out, 1.0f, l.dact,
                   params + l.weight, 0.0f, din);
    if (i > 0) {
      backend_->ReluGrad(static_cast<int64_t>(n) * l.in, in, din);
    } else {
      backend_->Gemm(true, false, l.out, bottom_width, n, 1.0f, l.dact,
                     bottom_out, 0.0f, grads + top0_dense_weight_);
      float* dbottom = bottom_.empty() ? nullptr : bottom_.back().dact;
      if (dbottom != nullptr) {
        backend_->Gemm(false, false, n, bottom_width, l.out, 1.0f, l.dact,
                       params + top0_dense_weight_, 0.0f, dbottom);
      }
      if (shape_.dot) {  // the dots' gradient, into the bags' and bottom's
        backend_->Gemm(true, false, l.out, shape_.pairs(), n, 1.0f, l.dact,
                       dots_, 0.0f, grads + top0_interaction_weight_);
        backend_->Gemm(false, false, n, shape_.pairs(), l.out, 1.0f, l.dact,
                       params + top0_interaction_weight_, 0.0f, ddots_);
        backend_->PairDotsGrad(n, shape_.fields + 1, shape_.dim, bags_,
                               bottom_out, ddots_, dbags_, dbottom);
      }
      if (dbottom != nullptr) {
        backend_->ReluGrad(static_cast<int64_t>(n) * bottom_width,
                           bottom_out, dbottom);
      }
    }
    if (ready) ready(l.weight);
  }
  // The rows' gradients: each row sums the gradients of the bags it is in.
  backend_->SegmentSum(b.rows, shape_.dim, b.row_offsets, b.row_bags, dbags_,
                       row_grads);
  // The bottom: layer i's dact holds the gradient w.r.t. its output.
  for (int i = static_cast<int>(bottom_.size()) - 1; i >= 0; --i) {
    Layer& l = bottom_[i];
    const float* in = i == 0 ? b.dense : bottom_[i - 1].act;
    backend_->Gemm(true, false, l.out, l.in, n, 1.0f, l.dact, in, 0.0f,
                   grads + l.weight);
    backend_->BiasGrad(n, l.out, l.dact, grads + l.bias);
    if (i > 0) {
      Layer& below = bottom_[i - 1];
      backend_->Gemm(false, false, n, l.in, l.out, 1.0f, l.dact,
                     params + l.weight, 0.0f, below.dact);
      backend_->ReluGrad(static_cast<int64_t>(n) * l.in, below.act,
                         below.dact);
    }
    if (ready) ready(l.weight);
  }
  return loss / n;
}

void EmbeddingMlp::Predict(const float* params, const Batch& b,
                           float* logits) {
  backend_->CopyToHost(Forward(params, b), logits, b.size);
}

}  // namespace fulcrum
