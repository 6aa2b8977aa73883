// The parameter layout: a model's tensors in a fixed order form one flat fp32
// vector, which is cut into partitions placed on shards. Every process derives
// the same layout from the same JobSpec: it is a pure function of
// (model, number of shards, partition_bytes), like ps-lite's key-range slicer.
#ifndef FULCRUM_COMMON_TENSOR_LAYOUT_H_
#define FULCRUM_COMMON_TENSOR_LAYOUT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fulcrum {

struct TensorInfo {
  std::string name;            // "fc1.weight"
  std::vector<int64_t> shape;  // row-major; Linear weights are [out, in]
  int64_t offset = 0;          // first element in the flat vector
  int64_t size = 0;            // number of elements
  int64_t fan_in = 0;          // for initialisation
  bool buffer = false;         // a running statistic: averaged, not optimized
};

struct Partition {
  int32_t id = 0;
  int64_t offset = 0;  // first element in the flat vector
  int64_t size = 0;    // number of elements (> 0)
  int32_t shard = 0;
};

class ParameterLayout {
 public:
  // Partitions hold at most `partition_bytes` and, so that shards balance and
  // pushes overlap backward, about total/(kPartitionsPerShard * num_shards)
  // (but not less than kMinPartitionElems). Tensors larger than that are split
  // into near-equal pieces; consecutive small tensors are packed together.
  // Partitions are placed largest first on the least-loaded shard.
  static constexpr int64_t kPartitionsPerShard = 4;
  static constexpr int64_t kMinPartitionElems = 4096;

  // A model has at most this many elements (16 GiB of fp32).
  static constexpr int64_t kMaxElements = int64_t{1} << 32;

  // `layers` = [inputs, hidden..., outputs]: one Linear (weight, bias) per
  // pair.
  static absl::StatusOr<ParameterLayout> ForMlp(const std::vector<int>& layers,
                                                int num_shards,
                                                int64_t partition_bytes);
  // Any model: `tensors` in order, name and shape each (offset and size are
  // computed; fan_in too when <= 0: the product of every dimension but the
  // first). INVALID_ARGUMENT naming the tensor for a dimension <= 0.
  static absl::StatusOr<ParameterLayout> ForTensors(
      std::vector<TensorInfo> tensors, int num_shards,
      int64_t partition_bytes);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<Partition>& partitions() const { return partitions_; }
  int num_shards() const { return num_shards_; }
  int64_t total_size() const { return total_size_; }

  // Partition ids placed on `shard`, ascending.
  std::vector<int32_t> PartitionsOfShard(int shard) const;
  int64_t ShardBytes(int shard) const;

 private:
  ParameterLayout() = default;
  absl::Status Cut(int64_t max_elems);
  void Place();

  std::vector<TensorInfo> tensors_;
  std::vector<Partition> partitions_;
  int num_shards_ = 1;
  int64_t total_size_ = 0;
};

// The elements of partition `p` that belong to buffer tensors, as [begin,
// end) ranges relative to p.offset, ascending.
std::vector<std::pair<int64_t, int64_t>> BufferRanges(
    const ParameterLayout& layout, const Partition& p);

// Deterministic initial value of every element in [begin, end) of the flat
// vector, written to out[0 .. end-begin). Depends only on (seed, element
// index), never on the partitioning: any number of shards yields the same
// model. Weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as in
// PyTorch's nn.Linear.
void InitializeParameters(const ParameterLayout& layout, uint64_t seed,
                          int64_t begin, int64_t end, float* out);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TENSOR_LAYOUT_H_
