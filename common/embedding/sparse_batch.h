// A batch's row gradients made ready for the shards: duplicate ids summed
// (a row occurs once per push, with how many samples touched it) and the
// distinct ids split by shard (placement.h). Worker side; no network.
//
// Thread safety: a SparseBatch is a value; Coalesce is pure.
#ifndef FULCRUM_COMMON_EMBEDDING_SPARSE_BATCH_H_
#define FULCRUM_COMMON_EMBEDDING_SPARSE_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace fulcrum {

struct SparseBatch {
  int dim = 0;
  std::vector<uint64_t> ids;     // distinct, in order of first occurrence
  std::vector<float> gradients;  // ids.size() x dim: the sum of each id's rows
  std::vector<uint32_t> counts;  // occurrences of each id
};

// Sums the rows of `gradients` (ids.size() x dim) that share an id.
// REQUIRES: gradients.size() == ids.size() * dim, dim >= 1.
SparseBatch Coalesce(absl::Span<const uint64_t> ids,
                     absl::Span<const float> gradients, int dim);

// The positions (into `ids`) of the ids each of `num_shards` shards holds,
// in order.
std::vector<std::vector<uint32_t>> SplitByShard(absl::Span<const uint64_t> ids,
                                                int num_shards);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_EMBEDDING_SPARSE_BATCH_H_
