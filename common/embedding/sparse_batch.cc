#include "common/embedding/sparse_batch.h"

#include "absl/container/flat_hash_map.h"
#include "common/embedding/placement.h"

namespace fulcrum {

SparseBatch Coalesce(absl::Span<const uint64_t> ids,
                     absl::Span<const float> gradients, int dim) {
  SparseBatch out;
  out.dim = dim;
  absl::flat_hash_map<uint64_t, uint32_t> row;
  row.reserve(ids.size());
  out.ids.reserve(ids.size());
  out.counts.reserve(ids.size());
  out.gradients.reserve(ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* g = gradients.data() + i * dim;
    auto [it, inserted] =
        row.try_emplace(ids[i], static_cast<uint32_t>(out.ids.size()));
    if (inserted) {
      out.ids.push_back(ids[i]);
      out.counts.push_back(1);
      out.gradients.insert(out.gradients.end(), g, g + dim);
      continue;
    }
    ++out.counts[it->second];
    float* sum = out.gradients.data() + size_t{it->second} * dim;
    for (int j = 0; j < dim; ++j) sum[j] += g[j];
  }
  return out;
}

std::vector<std::vector<uint32_t>> SplitByShard(absl::Span<const uint64_t> ids,
                                                int num_shards) {
  std::vector<std::vector<uint32_t>> out(num_shards);
  for (size_t i = 0; i < ids.size(); ++i) {
    out[ShardOfRow(ids[i], num_shards)].push_back(static_cast<uint32_t>(i));
  }
  return out;
}

}  // namespace fulcrum
