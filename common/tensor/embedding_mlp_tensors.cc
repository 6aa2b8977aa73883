#include "common/tensor/embedding_mlp_tensors.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

TensorInfo Tensor(std::string name, std::vector<int64_t> shape,
                  int64_t fan_in = 0) {
  TensorInfo t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.fan_in = fan_in;
  return t;
}

}  // namespace

absl::StatusOr<std::vector<TensorInfo>> EmbeddingMlpTensors(
    const EmbeddingMlpShape& s) {
  if (s.fields < 1) return absl::InvalidArgumentError("fields must be >= 1");
  if (s.dense < 1) return absl::InvalidArgumentError("dense must be >= 1");
  if (s.dim < 1) return absl::InvalidArgumentError("dim must be >= 1");
  for (size_t i = 0; i < s.bottom.size(); ++i) {
    if (s.bottom[i] < 1)
      return absl::InvalidArgumentError(absl::StrCat("bottom[", i, "] must be >= 1"));
  }
  for (size_t i = 0; i < s.top.size(); ++i) {
    if (s.top[i] < 1)
      return absl::InvalidArgumentError(absl::StrCat("top[", i, "] must be >= 1"));
  }
  std::vector<TensorInfo> t;
  int in = s.dense;
  for (size_t l = 0; l < s.bottom.size(); ++l) {
    t.push_back(Tensor(absl::StrCat("bottom.", l, ".weight"), {s.bottom[l], in}));
    t.push_back(Tensor(absl::StrCat("bottom.", l, ".bias"), {s.bottom[l]}, in));
    in = s.bottom[l];
  }
  if (s.dot && (s.bottom.empty() || s.bottom.back() != s.dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bottom must end at the table's dim (", s.dim,
        ") for the dot interaction"));
  }
  const int64_t bags = int64_t{s.fields} * s.dim;
  const int64_t fan_in = bags + in + s.pairs();
  const int out0 = s.top.empty() ? 1 : s.top[0];
  t.push_back(Tensor("top.0.embedding_weight", {out0, bags}, fan_in));
  t.push_back(Tensor("top.0.dense_weight", {out0, in}, fan_in));
  if (s.dot)
    t.push_back(Tensor("top.0.interaction_weight", {out0, s.pairs()}, fan_in));
  t.push_back(Tensor("top.0.bias", {out0}, fan_in));
  for (size_t l = 1; l <= s.top.size(); ++l) {
    const int out = l < s.top.size() ? s.top[l] : 1;
    t.push_back(Tensor(absl::StrCat("top.", l, ".weight"), {out, s.top[l - 1]}));
    t.push_back(Tensor(absl::StrCat("top.", l, ".bias"), {out}, s.top[l - 1]));
  }
  return t;
}

}  // namespace fulcrum
