// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed,
// decoded once into memory. Pixels stay uint8 (4x less memory traffic than
// floats); batches are converted while they are gathered.
#ifndef FULCRUM_WORKER_DATA_IDX_H_
#define FULCRUM_WORKER_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fulcrum {

struct IdxImages {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols
};

// Reads an idx3-ubyte file (magic 0x00000803). At most `limit` images when
// limit > 0. Truncated or malformed files are DATA_LOSS / INVALID_ARGUMENT
// naming the file; a missing one is NOT_FOUND.
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path,
                                        int64_t limit = 0);

// Reads an idx1-ubyte file (magic 0x00000801).
absl::StatusOr<std::vector<int32_t>> ReadIdxLabels(const std::string& path,
                                                   int64_t limit = 0);

struct LabeledImages {
  IdxImages images;
  std::vector<int32_t> labels;
};

// Loads `<dir>/<prefix>-images-idx3-ubyte[.gz]` and the matching labels
// (prefix "train" or "t10k"), checking they agree in count and that labels
// are < `classes`.
absl::StatusOr<LabeledImages> LoadIdxSplit(const std::string& dir,
                                           const std::string& prefix,
                                           int64_t limit, int classes);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_IDX_H_
