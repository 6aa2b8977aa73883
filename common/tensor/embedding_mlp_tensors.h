// The dense tensors of fulcrum-worker's click model (model.type
// embedding_mlp; worker/model/embedding_mlp.h computes with them): a pure
// function of the shape, so that every process derives the same layout
// (common/config/model_layout.h).
#ifndef FULCRUM_COMMON_TENSOR_EMBEDDING_MLP_TENSORS_H_
#define FULCRUM_COMMON_TENSOR_EMBEDDING_MLP_TENSORS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor/layout.h"

namespace fulcrum {

struct EmbeddingMlpShape {
  int fields = 26;          // embedding bags per sample
  int dense = 13;           // dense features per sample
  int dim = 8;              // the table's row width
  std::vector<int> bottom;  // hidden widths of the bottom MLP; may be empty
  std::vector<int> top;     // hidden widths of the top MLP; may be empty
  // DLRM's dot interaction: the top MLP also sees the dot product of every
  // pair among the fields' bags and the bottom's output (whose width must
  // then be dim): (fields + 1) * fields / 2 more inputs.
  bool dot = false;
  int pairs() const { return dot ? (fields + 1) * fields / 2 : 0; }
};

// The dense tensors, in layout order: bottom.L.{weight,bias} for each bottom
// layer, then top.0.{embedding_weight [t0, fields*dim], dense_weight [t0,
// bottom_out], interaction_weight [t0, pairs] (dot only), bias}, then
// top.L.{weight,bias} up to the output (width 1). Fan-in of the top.0
// weights is their common input width. INVALID_ARGUMENT naming the field
// for a width, fields, dense or dim < 1, or a dot interaction whose bottom
// does not end at dim.
absl::StatusOr<std::vector<TensorInfo>> EmbeddingMlpTensors(
    const EmbeddingMlpShape& shape);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TENSOR_EMBEDDING_MLP_TENSORS_H_
