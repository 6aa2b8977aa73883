#include "common/config/model_layout.h"

#include "absl/strings/str_cat.h"

namespace fulcrum {

std::vector<TensorInfo> TensorsOf(const v1::ModelSpec& model) {
  std::vector<TensorInfo> tensors;
  for (const v1::TensorSpec& t : model.tensors()) {
    tensors.push_back(
        {t.name(), {t.shape().begin(), t.shape().end()}, 0, 0, 0, t.buffer()});
  }
  return tensors;
}

absl::StatusOr<ParameterLayout> LayoutForSpec(const v1::JobSpec& spec) {
  const v1::ModelSpec& m = spec.model();
  if (m.type() == "external") {
    if (m.tensors_size() == 0) {
      return absl::FailedPreconditionError(
          "model.tensors: the external model's tensors are not declared yet");
    }
    return ParameterLayout::ForTensors(TensorsOf(m), spec.shards(),
                                       spec.partition_bytes());
  }
  return ParameterLayout::ForMlp({m.layers().begin(), m.layers().end()},
                                 spec.shards(), spec.partition_bytes());
}

}  // namespace fulcrum
