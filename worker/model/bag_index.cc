#include "worker/model/bag_index.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::Status BagIndexer::Build(absl::Span<const uint64_t> ids,
                               absl::Span<const int32_t> offsets,
                               BagIndex* out) {
  if (offsets.empty() || offsets.front() != 0 ||
      static_cast<size_t>(offsets.back()) != ids.size() ||
      ids.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offsets must run from 0 to the number of ids (", ids.size(), ")"));
  }
  for (size_t b = 1; b < offsets.size(); ++b) {
    if (offsets[b] < offsets[b - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("offsets[", b, "] decreases"));
    }
  }
  row_of_.clear();
  out->ids.clear();
  out->counts.clear();
  out->bag_offsets.assign(offsets.begin(), offsets.end());
  out->bag_rows.resize(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) {
    auto [it, fresh] =
        row_of_.try_emplace(ids[j], static_cast<int32_t>(out->ids.size()));
    if (fresh) {
      out->ids.push_back(ids[j]);
      out->counts.push_back(0);
    }
    out->bag_rows[j] = it->second;
    ++out->counts[it->second];
  }
  // Row -> bags: a counting sort of the occurrences by row; bags ascend
  // within a row because occurrences are visited in bag order.
  const int rows = out->rows();
  out->row_offsets.assign(rows + 1, 0);
  for (int r = 0; r < rows; ++r)
    out->row_offsets[r + 1] = out->row_offsets[r] + out->counts[r];
  out->row_bags.resize(ids.size());
  std::vector<int32_t>& next = scratch_;
  next.assign(out->row_offsets.begin(), out->row_offsets.end() - 1);
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    for (int32_t j = offsets[b]; j < offsets[b + 1]; ++j)
      out->row_bags[next[out->bag_rows[j]]++] = static_cast<int32_t>(b);
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
