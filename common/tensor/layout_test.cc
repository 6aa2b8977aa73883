#include "common/tensor/layout.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

const std::vector<int> kReferenceMlp = {784, 256, 128, 10};
constexpr int64_t k4MiB = 4 << 20;

// Every element belongs to exactly one partition, partitions are contiguous
// and in order, and none exceeds the byte limit.
void ExpectCovers(const ParameterLayout& layout, int64_t partition_bytes) {
  int64_t next = 0;
  for (size_t i = 0; i < layout.partitions().size(); ++i) {
    const Partition& p = layout.partitions()[i];
    EXPECT_EQ(p.id, static_cast<int32_t>(i));
    EXPECT_EQ(p.offset, next);
    EXPECT_GT(p.size, 0);
    EXPECT_LE(p.size * 4, partition_bytes);
    EXPECT_GE(p.shard, 0);
    EXPECT_LT(p.shard, layout.num_shards());
    next += p.size;
  }
  EXPECT_EQ(next, layout.total_size());
}

TEST(LayoutTest, ReferenceMlpTensors) {
  auto layout = ParameterLayout::ForMlp(kReferenceMlp, 1, k4MiB);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->tensors().size(), 6u);
  EXPECT_EQ(layout->tensors()[0].name, "fc1.weight");
  EXPECT_EQ(layout->tensors()[0].shape, (std::vector<int64_t>{256, 784}));
  EXPECT_EQ(layout->tensors()[1].offset, 256 * 784);
  EXPECT_EQ(layout->tensors()[5].name, "fc3.bias");
  EXPECT_EQ(layout->total_size(),
            784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  ExpectCovers(*layout, k4MiB);
}

TEST(LayoutTest, SameInputsSameLayout) {
  for (int shards : {1, 2, 3, 5}) {
    auto a = ParameterLayout::ForMlp(kReferenceMlp, shards, k4MiB);
    auto b = ParameterLayout::ForMlp(kReferenceMlp, shards, k4MiB);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->partitions().size(), b->partitions().size());
    for (size_t i = 0; i < a->partitions().size(); ++i) {
      EXPECT_EQ(a->partitions()[i].offset, b->partitions()[i].offset);
      EXPECT_EQ(a->partitions()[i].size, b->partitions()[i].size);
      EXPECT_EQ(a->partitions()[i].shard, b->partitions()[i].shard);
    }
  }
}

TEST(LayoutTest, BalancesShards) {
  for (int shards : {2, 3, 4, 6, 8}) {
    auto layout = ParameterLayout::ForMlp(kReferenceMlp, shards, k4MiB);
    ASSERT_TRUE(layout.ok());
    ExpectCovers(*layout, k4MiB);
    int64_t lo = INT64_MAX, hi = 0;
    for (int s = 0; s < shards; ++s) {
      lo = std::min(lo, layout->ShardBytes(s));
      hi = std::max(hi, layout->ShardBytes(s));
    }
    EXPECT_GT(lo, 0) << shards;
    EXPECT_LE(static_cast<double>(hi) / lo, 1.25) << shards << " shards";
  }
}

TEST(LayoutTest, SplitsLargeAndPacksSmallTensors) {
  // 64-byte partitions: the 10x10 weight (400 B) is split, tiny biases packed.
  auto layout = ParameterLayout::ForMlp({10, 10, 2, 1}, 1, 64);
  ASSERT_TRUE(layout.ok());
  ExpectCovers(*layout, 64);
  // fc1.weight = 100 elements, 16 per partition at most -> 7 pieces.
  int pieces = 0;
  for (const Partition& p : layout->partitions()) {
    if (p.offset + p.size <= 100) ++pieces;
  }
  EXPECT_EQ(pieces, 7);
  // fc2.bias (2) .. fc3.bias (1) = 2+2+1 elements packed into one partition.
  EXPECT_EQ(layout->partitions().back().size, 10 + 2 + 2 + 1 - 10);
}

TEST(LayoutTest, MoreShardsThanPartitionsLeavesSomeEmpty) {
  auto layout = ParameterLayout::ForMlp({4, 2}, 3, 4096);
  ASSERT_TRUE(layout.ok());
  ExpectCovers(*layout, 4096);
  EXPECT_EQ(layout->partitions().size(), 1u);
  EXPECT_EQ(layout->PartitionsOfShard(0).size(), 1u);
  EXPECT_TRUE(layout->PartitionsOfShard(2).empty());
}

TEST(LayoutTest, BufferRangesArePartitionRelative) {
  // w [6], rm [3] (buffer), rv [3] (buffer), b [4]; 32-byte partitions.
  std::vector<TensorInfo> tensors = {{"w", {6}},
                                     {"rm", {3}, 0, 0, 0, true},
                                     {"rv", {3}, 0, 0, 0, true},
                                     {"b", {4}}};
  auto layout = ParameterLayout::ForTensors(tensors, 1, 32);
  ASSERT_TRUE(layout.ok());
  ExpectCovers(*layout, 32);
  // Buffers are elements [6, 12) of the flat vector, whatever the cut.
  std::vector<bool> buffer(16, false);
  for (const Partition& p : layout->partitions()) {
    int64_t last_end = -1;
    for (const auto& [begin, end] : BufferRanges(*layout, p)) {
      ASSERT_LT(begin, end);
      ASSERT_GT(begin, last_end);  // ascending, adjacent ones merged
      ASSERT_LE(end, p.size);
      last_end = end;
      for (int64_t i = begin; i < end; ++i) buffer[p.offset + i] = true;
    }
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(buffer[i], i >= 6 && i < 12) << i;
}

TEST(LayoutTest, RejectsBadInput) {
  EXPECT_EQ(ParameterLayout::ForMlp({784}, 1, k4MiB).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad = ParameterLayout::ForMlp({784, 0, 10}, 1, k4MiB);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("model.layers[1]"), std::string::npos);
  EXPECT_EQ(ParameterLayout::ForMlp({4, 2}, 0, k4MiB).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InitTest, IndependentOfShardsAndRanges) {
  auto one = ParameterLayout::ForMlp(kReferenceMlp, 1, k4MiB);
  auto three = ParameterLayout::ForMlp(kReferenceMlp, 3, k4MiB);
  ASSERT_TRUE(one.ok() && three.ok());
  std::vector<float> whole(one->total_size());
  InitializeParameters(*one, 7, 0, one->total_size(), whole.data());
  for (const Partition& p : three->partitions()) {
    std::vector<float> part(p.size);
    InitializeParameters(*three, 7, p.offset, p.offset + p.size, part.data());
    for (int64_t i = 0; i < p.size; ++i) {
      ASSERT_EQ(part[i], whole[p.offset + i]) << "element " << p.offset + i;
    }
  }
  // Bounded by 1/sqrt(fan_in) and not constant.
  const float bound = 1.0f / std::sqrt(784.0f);
  float lo = 1, hi = -1;
  for (int64_t i = 0; i < 256 * 784; ++i) {
    ASSERT_LE(std::abs(whole[i]), bound);
    lo = std::min(lo, whole[i]);
    hi = std::max(hi, whole[i]);
  }
  EXPECT_LT(lo, -0.9f * bound);
  EXPECT_GT(hi, 0.9f * bound);
  std::vector<float> other(one->total_size());
  InitializeParameters(*one, 8, 0, one->total_size(), other.data());
  EXPECT_NE(other[0], whole[0]);
}

}  // namespace
}  // namespace fulcrum
