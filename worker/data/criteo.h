// Click logs in the Criteo display-advertising TSV format (what
// tools/make_ctr_data writes, and real logs): per line a 0/1 label, 13
// integer features and 26 categorical features (hex-hashed), tab-separated,
// empty = missing. Read into arrays exactly as examples/torch/ctr/
// ctr_data.py reads them, so the C++ and PyTorch workers see the same data:
//   dense  log(1 + max(x, 0)), 0 when missing;
//   ids    field f's category c as the uint64 id (f + 1) << 32 | c; a
//          missing category is its field's id (f + 1) << 32.
// Held compactly (160 bytes a line: the categories as 32 bits, the field
// implied by the column), so a worker holds ~6 M lines a GiB.
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
  std::vector<uint32_t> cats;  // [count x kFields], the category c (0: missing)

  // Line `line`'s kFields ids into out[0..kFields).
  void Ids(int64_t line, uint64_t* out) const {
    const uint32_t* c = &cats[line * kFields];
    for (int f = 0; f < kFields; ++f)
      out[f] = uint64_t{static_cast<uint32_t>(f) + 1} << 32 | c[f];
  }
  uint64_t id(int64_t line, int field) const {
    return uint64_t{static_cast<uint32_t>(field) + 1} << 32 |
           cats[line * kFields + field];
  }
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
