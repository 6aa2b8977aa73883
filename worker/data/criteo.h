// Click logs in the Criteo display-advertising TSV format (what
// tools/make_ctr_data writes, and real logs): per line a 0/1 label, 13
// integer features and 26 categorical features (hex-hashed), tab-separated,
// empty = missing. Read into arrays exactly as examples/torch/ctr/
// ctr_data.py reads them, so the C++ and PyTorch workers see the same data:
//   dense  log(1 + max(x, 0)), 0 when missing;
//   ids    field f's category c as the uint64 id (f + 1) << 32 | c; a
//          missing category is its field's id (f + 1) << 32.
#ifndef FULCRUM_WORKER_DATA_CRITEO_H_
#define FULCRUM_WORKER_DATA_CRITEO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fulcrum {

struct ClickLogs {
  static constexpr int kDense = 13;
  static constexpr int kFields = 26;
  int64_t count = 0;
  std::vector<float> labels;  // [count], 0 or 1
  std::vector<float> dense;   // [count x kDense]
  std::vector<uint64_t> ids;  // [count x kFields]
};

// The first `limit` lines of `path` (0: all). INVALID_ARGUMENT naming the
// file, line and column for a line that is not of the format (a label not 0
// or 1, a number or category that does not parse, a wrong column count);
// NOT_FOUND when the file cannot be opened.
absl::StatusOr<ClickLogs> LoadCriteo(const std::string& path, int64_t limit);

// `<dir>/train.tsv` or `<dir>/test.tsv`.
absl::StatusOr<ClickLogs> LoadCriteoSplit(const std::string& dir, bool train,
                                          int64_t limit);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_CRITEO_H_
