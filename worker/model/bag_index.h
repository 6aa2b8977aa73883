// The host side of an embedding-bag step: a batch's ids, grouped into bags,
// turned into what the shards and the backend need - the distinct ids (one
// pull, one pushed row gradient each, with how often it occurred), and the
// two index maps of Backend::SegmentSum: bag -> rows (forward) and row ->
// bags (backward, a deterministic scatter-add).
//
// Thread safety: a BagIndexer is used by one thread; it keeps its memory
// between batches (the hot path allocates nothing once warm).
#ifndef FULCRUM_WORKER_MODEL_BAG_INDEX_H_
#define FULCRUM_WORKER_MODEL_BAG_INDEX_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace fulcrum {

struct BagIndex {
  std::vector<uint64_t> ids;         // distinct, in order of first occurrence
  std::vector<uint32_t> counts;      // occurrences of each id
  std::vector<int32_t> bag_offsets;  // bags + 1: bag b's occurrences are
  std::vector<int32_t> bag_rows;     //   bag_rows[bag_offsets[b] ..]: rows
                                     //   (positions in ids)
  std::vector<int32_t> row_offsets;  // ids.size() + 1: row r's occurrences
  std::vector<int32_t> row_bags;     //   are row_bags[row_offsets[r] ..]:
                                     //   the bags, ascending
  int bags() const { return static_cast<int>(bag_offsets.size()) - 1; }
  int rows() const { return static_cast<int>(ids.size()); }
};

class BagIndexer {
 public:
  // Bag b holds ids[offsets[b] .. offsets[b+1]) (repeats allowed, also
  // within a bag: they add up). INVALID_ARGUMENT naming `offsets` unless
  // it starts at 0, never decreases and ends at ids.size() (<= 2^31 - 1).
  absl::Status Build(absl::Span<const uint64_t> ids,
                     absl::Span<const int32_t> offsets, BagIndex* out);

 private:
  absl::flat_hash_map<uint64_t, int32_t> row_of_;
  std::vector<int32_t> scratch_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_MODEL_BAG_INDEX_H_
