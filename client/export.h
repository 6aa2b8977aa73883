// `fulcrumctl export`: assembles a job's parameters, as the coordinator's
// ExportJob streams them (the spec, then every shard's chunks, then every
// shard's embedding rows), into a model file (common/tensor/model_file.h)
// and the tables (common/tensor/table_file.h). No network here: fulcrumctl
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
#include "common/tensor/table_file.h"
#include "fulcrum/v1/coordinator.pb.h"

namespace fulcrum {

class ModelAssembler {
 public:
  // One message of the stream. DATA_LOSS for a chunk outside the layout;
  // INVALID_ARGUMENT for a chunk before the spec or a spec with no layout.
  absl::Status Add(const v1::ExportChunk& chunk);
  // Every partition must have arrived whole (else DATA_LOSS) and, for a
  // sync job, all at one version (else FAILED_PRECONDITION: the job is still
  // training, export it once it ended). An ssp/async job's partitions may
  // differ (they apply pushes on arrival); the model's version is the
  // newest.
  absl::StatusOr<ModelFile> Finish();
  // The job's embedding tables as the pages came (every table of the spec,
  // empty ones too); valid after Add saw the spec.
  const std::vector<ExportedTable>& tables() const { return tables_; }

 private:
  absl::Status AddRows(int32_t shard, const v1::RowsPage& page);
  std::vector<ExportedTable> tables_;  // in the spec's order
  std::optional<ParameterLayout> layout_;
  ModelFile model_;
  std::vector<int64_t> received_;
  std::set<int64_t> versions_;
  bool arrival_ = false;  // the spec's consistency is ssp or async
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_EXPORT_H_
