// The parameter layout of a job's model: the one function every process
// derives it with (shards, workers, the export), whatever the model type.
#ifndef FULCRUM_COMMON_CONFIG_MODEL_LAYOUT_H_
#define FULCRUM_COMMON_CONFIG_MODEL_LAYOUT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor/embedding_mlp_tensors.h"
#include "common/tensor/layout.h"
#include "fulcrum/v1/job.pb.h"

namespace fulcrum {

// mlp: ParameterLayout::ForMlp(model.layers); embedding_mlp: ForTensors of
// EmbeddingMlpTensors(EmbeddingMlpShapeOf(spec)); external: ForTensors of the
// declared tensors (FAILED_PRECONDITION while none are declared).
absl::StatusOr<ParameterLayout> LayoutForSpec(const v1::JobSpec& spec);

// An embedding_mlp's shape: the Criteo format's 26 categorical fields and
// 13 dense features, the row width of the table model.table names
// (INVALID_ARGUMENT naming model.table when the job has no such table),
// model.bottom and model.top.
absl::StatusOr<EmbeddingMlpShape> EmbeddingMlpShapeOf(const v1::JobSpec& spec);

// The most bytes one of the job's shards holds for it: its partitions'
// values and optimizer state, and the aggregation's buffers (sync: the
// previous version and the step's sum; ssp/async: the next version and
// one staging copy per worker, workers.max of them).
int64_t ShardBytes(const v1::JobSpec& spec, const ParameterLayout& layout);

// The declared tensors as the layout's TensorInfo (offsets not yet set).
std::vector<TensorInfo> TensorsOf(const v1::ModelSpec& model);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONFIG_MODEL_LAYOUT_H_
