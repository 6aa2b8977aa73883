// The file `fulcrumctl export` writes beside the model file for a job with
// embedding tables (FILE.tables): every resident row's values, by table.
// Optimizer state and push counts stay on the shards (checkpoints hold
// them); this is what serving a model needs.
//
// Layout (little-endian): magic "FTB1", uint32 number of tables, per table:
// uint32 name length, name, int32 dim, uint64 rows, rows x uint64 ids, rows
// x dim fp32 values; then uint32 CRC-32C of everything before it.
#ifndef FULCRUM_COMMON_TENSOR_TABLE_FILE_H_
#define FULCRUM_COMMON_TENSOR_TABLE_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fulcrum {

struct ExportedTable {
  std::string name;
  int dim = 0;
  std::vector<uint64_t> ids;   // distinct
  std::vector<float> values;   // ids.size() x dim
};

// Writes to a temp file and renames it into place.
absl::Status WriteTableFile(const std::string& path,
                            const std::vector<ExportedTable>& tables);
// NOT_FOUND if missing; DATA_LOSS if corrupt or truncated.
absl::StatusOr<std::vector<ExportedTable>> ReadTableFile(
    const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TENSOR_TABLE_FILE_H_
