// The file `fulcrumctl export` writes: a trained model's parameters in
// ParameterLayout order (fc1.weight [out, in] row-major, fc1.bias, fc2...).
//
// Layout (little-endian): magic "FMD1", uint32 format version (1), int64
// version (updates applied), uint32 number of layer sizes, int32 sizes...,
// int64 number of floats, uint32 CRC-32C of the floats, then the floats.
#ifndef FULCRUM_COMMON_TENSOR_MODEL_FILE_H_
#define FULCRUM_COMMON_TENSOR_MODEL_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fulcrum {

struct ModelFile {
  std::vector<int32_t> layers;  // [inputs, hidden..., classes]
  int64_t version = 0;
  std::vector<float> params;
};

// Writes to a temp file and renames it into place.
absl::Status WriteModelFile(const std::string& path, const ModelFile& model);
// NOT_FOUND if missing; DATA_LOSS if corrupt or truncated.
absl::StatusOr<ModelFile> ReadModelFile(const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TENSOR_MODEL_FILE_H_
