// SumGradients and ParameterChannel::PushSum's default: the pre-reduced
// sum a channel sends, bit for bit the leader's summation order.
#include "common/dataplane/parameter_channel.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(SumGradientsTest, SumsInOrderBitForBitAcrossBlocks) {
  constexpr int64_t kTotal = 5000, kBegin = 300, kN = 4500;  // > 2 blocks
  std::vector<std::vector<float>> g(3, std::vector<float>(kTotal));
  for (int k = 0; k < 3; ++k)
    for (int64_t i = 0; i < kTotal; ++i)
      g[k][i] = std::sin(0.37f * i + k) * (k + 1) / 3.0f;
  const std::vector<WeightedGradient> sources = {
      {g[0].data(), 0.5f}, {g[1].data(), 0.3f}, {g[2].data(), 0.2f}};
  std::vector<float> out(kN, -1.0f);
  SumGradients(sources, kBegin, kN, out.data());
  for (int64_t i = 0; i < kN; ++i) {
    float want = 0.5f * g[0][kBegin + i];  // the first times its weight,
    want += 0.3f * g[1][kBegin + i];       // then each next added
    want += 0.2f * g[2][kBegin + i];
    ASSERT_EQ(out[i], want) << "element " << i;
  }
  SumGradients({}, kBegin, kN, out.data());  // none: zeros
  for (float v : out) ASSERT_EQ(v, 0.0f);
}

// A channel that records what PushShares got.
class RecordingChannel : public ParameterChannel {
 public:
  absl::Status Initialize(const float*) override { return absl::OkStatus(); }
  absl::StatusOr<int64_t> Open() override { return 0; }
  void Push(int32_t, int64_t, int64_t, const float*, bool, PushRange) override {}
  void PushShares(int32_t id, int64_t step, int64_t samples,
                  const float* grads, bool stop,
                  absl::Span<const MemberShare> shares) override {
    pushed = {id, step, samples, grads, stop, {}, shares};
  }
  absl::Status WaitForClock(int64_t, absl::Time, bool*,
                            absl::FunctionRef<void(int32_t)>) override {
    return absl::OkStatus();
  }
  void Cancel() override {}
  absl::Status Close() override { return absl::OkStatus(); }
  QueuedPush pushed{-1, 0, 0, nullptr, false, {}};
};

TEST(PushSumTest, TheDefaultSumsThePartitionIntoScratchAndPushesShares) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {6, 5, 4, 3, 2, 1};
  std::vector<float> scratch(6, 7.0f);
  const std::vector<WeightedGradient> sources = {{a.data(), 0.25f},
                                                 {b.data(), 0.75f}};
  const std::vector<MemberShare> shares = {{1, {}}, {3, {}}};
  RecordingChannel channel;
  const Partition part{2, 2, 3, 0};  // elements [2, 5)
  channel.PushSum(part, 9, 4, sources, scratch.data(), true, shares);
  EXPECT_EQ(channel.pushed.id, 2);
  EXPECT_EQ(channel.pushed.step, 9);
  EXPECT_EQ(channel.pushed.samples, 4);
  EXPECT_TRUE(channel.pushed.stop);
  EXPECT_EQ(channel.pushed.grads, scratch.data());
  EXPECT_EQ(channel.pushed.shares.size(), 2u);
  // Only the partition's elements were written.
  EXPECT_EQ(scratch, (std::vector<float>{7, 7, 0.25f * 3 + 0.75f * 4,
                                          0.25f * 4 + 0.75f * 3,
                                          0.25f * 5 + 0.75f * 2, 7}));
}

}  // namespace
}  // namespace fulcrum
