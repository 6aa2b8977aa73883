#include "common/config/model_layout.h"

#include <algorithm>
#include <string>

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

absl::StatusOr<EmbeddingMlpShape> EmbeddingMlpShapeOf(
    const v1::JobSpec& spec) {
  const v1::ModelSpec& m = spec.model();
  EmbeddingMlpShape shape;
  shape.fields = 26;
  shape.dense = 13;
  shape.dim = 0;
  for (const v1::EmbeddingTableSpec& t : spec.embeddings()) {
    if (t.name() == m.table()) shape.dim = t.dim();
  }
  if (shape.dim == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.table: '", m.table().substr(0, 64),
        "' is not one of the job's embeddings"));
  }
  shape.bottom.assign(m.bottom().begin(), m.bottom().end());
  shape.top.assign(m.top().begin(), m.top().end());
  shape.dot = m.interaction() == "dot";
  return shape;
}

absl::StatusOr<ParameterLayout> LayoutForSpec(const v1::JobSpec& spec) {
  const v1::ModelSpec& m = spec.model();
  if (m.type() == "embedding_mlp") {
    absl::StatusOr<EmbeddingMlpShape> shape = EmbeddingMlpShapeOf(spec);
    if (!shape.ok()) return shape.status();
    absl::StatusOr<std::vector<TensorInfo>> tensors = EmbeddingMlpTensors(*shape);
    if (!tensors.ok()) return tensors.status();
    return ParameterLayout::ForTensors(*std::move(tensors), spec.shards(),
                                       spec.partition_bytes());
  }
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

int64_t ShardBytes(const v1::JobSpec& spec, const ParameterLayout& layout) {
  const std::string& t = spec.optimizer().type();
  const int64_t slots = t == "momentum" || t == "nesterov" ? 1
                        : t == "adam" || t == "adamw"      ? 2
                                                           : 0;
  const std::string& mode = spec.consistency().mode();
  const bool barrier = mode.empty() || mode == "sync" ||
                       (mode == "ssp" && spec.consistency().staleness() == 0);
  // Floats per parameter: values and state, twice (the undo copy or the
  // next version), plus the step's sum or the members' staging.
  const int64_t floats = 2 * (1 + slots) +
                         (barrier ? 1 : std::max(1, spec.workers().max()));
  int64_t most = 0;
  for (int shard = 0; shard < spec.shards(); ++shard) {
    int64_t elems = 0;
    for (int32_t id : layout.PartitionsOfShard(shard))
      elems += layout.partitions()[id].size;
    most = std::max(most, elems);
  }
  return most * floats * 4;
}

}  // namespace fulcrum
