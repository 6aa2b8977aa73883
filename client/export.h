// `fulcrumctl export`: assembles a job's parameters, as the coordinator's
// ExportJob streams them (the spec, then every shard's chunks), into a
// model file (common/tensor/model_file.h). No network here: fulcrumctl
// feeds it the stream.
#ifndef FULCRUM_CLIENT_EXPORT_H_
#define FULCRUM_CLIENT_EXPORT_H_

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor/layout.h"
#include "common/tensor/model_file.h"
#include "fulcrum/v1/coordinator.pb.h"

namespace fulcrum {

class ModelAssembler {
 public:
  // One message of the stream. DATA_LOSS for a chunk outside the layout;
  // INVALID_ARGUMENT for a chunk before the spec or a spec with no layout.
  absl::Status Add(const v1::ExportChunk& chunk);
  // Every partition must have arrived whole and all at one version, else
  // DATA_LOSS, or FAILED_PRECONDITION (the job is still training: export it
  // once it ended).
  absl::StatusOr<ModelFile> Finish();

 private:
  std::optional<ParameterLayout> layout_;
  ModelFile model_;
  std::vector<int64_t> received_;
  std::set<int64_t> versions_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_EXPORT_H_
