#include "common/tensor/layout.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/hash/hash.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

uint64_t SplitMix64(uint64_t x) { return Mix64(x + kGoldenGamma); }

}  // namespace

absl::StatusOr<ParameterLayout> ParameterLayout::ForMlp(
    const std::vector<int>& layers, int num_shards, int64_t partition_bytes) {
  if (layers.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers needs at least 2 sizes, got ", layers.size()));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.layers[", i, "] must be > 0, got ", layers[i]));
    }
  }
  std::vector<TensorInfo> tensors;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    const int64_t in = layers[i], out = layers[i + 1];
    const std::string prefix = absl::StrCat("fc", i + 1);
    tensors.push_back({prefix + ".weight", {out, in}, 0, 0, in});
    tensors.push_back({prefix + ".bias", {out}, 0, 0, in});
  }
  return ForTensors(std::move(tensors), num_shards, partition_bytes);
}

absl::StatusOr<ParameterLayout> ParameterLayout::ForTensors(
    std::vector<TensorInfo> tensors, int num_shards, int64_t partition_bytes) {
  if (num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards must be >= 1, got ", num_shards));
  }
  if (partition_bytes < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition_bytes must be >= 4, got ", partition_bytes));
  }
  if (tensors.empty())
    return absl::InvalidArgumentError("the model has no tensors");
  ParameterLayout layout;
  layout.num_shards_ = num_shards;
  int64_t offset = 0;
  for (TensorInfo& t : tensors) {
    int64_t size = 1;
    for (int64_t d : t.shape) {
      if (d <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", t.name, "' has a dimension of ", d, " (must be > 0)"));
      }
      size *= d;
      if (size > kMaxElements) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", t.name, "' has more than ", kMaxElements, " elements"));
      }
    }
    t.offset = offset;
    t.size = size;
    if (t.fan_in <= 0) t.fan_in = t.shape.size() > 1 ? size / t.shape[0] : size;
    offset += size;
    if (offset > kMaxElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model has more than ", kMaxElements, " elements"));
    }
  }
  layout.tensors_ = std::move(tensors);
  layout.total_size_ = offset;
  const int64_t spread = (offset + kPartitionsPerShard * num_shards - 1) /
                         (kPartitionsPerShard * num_shards);
  const int64_t max_elems =
      std::min(partition_bytes / 4, std::max(kMinPartitionElems, spread));
  RETURN_IF_ERROR(layout.Cut(max_elems));
  layout.Place();
  return layout;
}

absl::Status ParameterLayout::Cut(int64_t max_elems) {
  int64_t pack_begin = 0, pack_size = 0;
  auto flush = [&] {
    if (pack_size == 0) return;
    partitions_.push_back(
        {static_cast<int32_t>(partitions_.size()), pack_begin, pack_size, 0});
    pack_size = 0;
  };
  for (const TensorInfo& t : tensors_) {
    if (t.size > max_elems) {
      flush();
      const int64_t pieces = (t.size + max_elems - 1) / max_elems;
      int64_t begin = t.offset;
      for (int64_t p = 0; p < pieces; ++p) {
        const int64_t size = t.size / pieces + (p < t.size % pieces ? 1 : 0);
        partitions_.push_back(
            {static_cast<int32_t>(partitions_.size()), begin, size, 0});
        begin += size;
      }
      continue;
    }
    if (pack_size + t.size > max_elems) flush();
    if (pack_size == 0) pack_begin = t.offset;
    pack_size += t.size;
  }
  flush();
  return absl::OkStatus();
}

void ParameterLayout::Place() {
  std::vector<int32_t> order(partitions_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return partitions_[a].size > partitions_[b].size;
  });
  std::vector<int64_t> load(num_shards_, 0);
  for (int32_t id : order) {
    const int shard = static_cast<int>(
        std::min_element(load.begin(), load.end()) - load.begin());
    partitions_[id].shard = shard;
    load[shard] += partitions_[id].size;
  }
}

std::vector<int32_t> ParameterLayout::PartitionsOfShard(int shard) const {
  std::vector<int32_t> ids;
  for (const Partition& p : partitions_) {
    if (p.shard == shard) ids.push_back(p.id);
  }
  return ids;
}

int64_t ParameterLayout::ShardBytes(int shard) const {
  int64_t bytes = 0;
  for (const Partition& p : partitions_) {
    if (p.shard == shard) bytes += p.size * 4;
  }
  return bytes;
}

std::vector<std::pair<int64_t, int64_t>> BufferRanges(
    const ParameterLayout& layout, const Partition& p) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const TensorInfo& t : layout.tensors()) {
    if (!t.buffer) continue;
    const int64_t lo = std::max(t.offset, p.offset);
    const int64_t hi = std::min(t.offset + t.size, p.offset + p.size);
    if (lo >= hi) continue;
    if (!out.empty() && out.back().second == lo - p.offset) {
      out.back().second = hi - p.offset;  // adjacent buffers: one range
    } else {
      out.emplace_back(lo - p.offset, hi - p.offset);
    }
  }
  return out;
}

void InitializeParameters(const ParameterLayout& layout, uint64_t seed,
                          int64_t begin, int64_t end, float* out) {
  const uint64_t key = SplitMix64(seed ^ 0x46756c6372756dULL);  // "Fulcrum"
  for (const TensorInfo& t : layout.tensors()) {
    const int64_t lo = std::max(begin, t.offset);
    const int64_t hi = std::min(end, t.offset + t.size);
    if (lo >= hi) continue;
    const double bound = 1.0 / std::sqrt(static_cast<double>(t.fan_in));
    for (int64_t i = lo; i < hi; ++i) {
      const uint64_t bits = SplitMix64(key + static_cast<uint64_t>(i));
      const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
      out[i - begin] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
  }
}

}  // namespace fulcrum
