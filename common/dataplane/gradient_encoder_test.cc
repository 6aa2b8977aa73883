#include "common/dataplane/gradient_encoder.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dataplane/randomk.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// One partition of 17 elements: with chunks of 4, chunks of 4, 4, 4, 4
// and 1 element.
ParameterLayout Layout() {
  return *ParameterLayout::ForTensors({{"t", {17}}}, 1, 1 << 20);
}

std::vector<uint32_t> Indices(const GradientEncoder::Chunk& c) {
  std::vector<uint32_t> out(c.indices.size() / 4);
  std::memcpy(out.data(), c.indices.data(), c.indices.size());
  return out;
}

std::vector<float> Values(const GradientEncoder::Chunk& c, WireEncoding e) {
  std::vector<float> out(c.bytes / ElementBytes(e));
  DecodeRun(e, c.data, static_cast<int64_t>(out.size()), out.data());
  return out;
}

TEST(GradientEncoderTest, DenseFp32LeavesFromTheGradientItself) {
  const ParameterLayout layout = Layout();
  GradientEncoder enc(&layout, {.chunk_elems = 4});
  std::vector<float> g(17, 1.5f);
  const GradientEncoder::Chunk c = enc.Encode(0, 16, 1, g.data(), 0, 1);
  EXPECT_EQ(c.data, reinterpret_cast<const char*>(g.data() + 16));
  EXPECT_EQ(c.bytes, 4u);
  EXPECT_TRUE(c.indices.empty());
  EXPECT_TRUE(enc.residual().empty());

  GradientEncoder bf16(&layout,
                       {.chunk_elems = 4, .encoding = WireEncoding::kBf16});
  // Into the caller's room (a shared-memory slot): no buffer of its own.
  char room[8];
  const GradientEncoder::Chunk r = bf16.Encode(0, 4, 4, g.data(), 0, 1, room);
  EXPECT_EQ(r.data, room);
  EXPECT_EQ(Values(r, WireEncoding::kBf16), std::vector<float>(4, 1.5f));
  EXPECT_EQ(bf16.dense_buffer_bytes(), 0u);
  // Without a room: the whole model's buffer, once, at the first use.
  const GradientEncoder::Chunk b = bf16.Encode(0, 8, 4, g.data(), 0, 1);
  EXPECT_EQ(b.bytes, 8u);
  EXPECT_EQ(Values(b, WireEncoding::kBf16), std::vector<float>(4, 1.5f));
  EXPECT_EQ(bf16.dense_buffer_bytes(), 17u * 2);
  const GradientEncoder::Chunk b2 = bf16.Encode(0, 0, 4, g.data(), 0, 1);
  EXPECT_EQ(b2.data + 8 * 2, b.data) << "one buffer, by flat element";
  EXPECT_EQ(bf16.dense_buffer_bytes(), 17u * 2);
}

// topk 0.5 of a chunk of 4: the two largest |a|, ascending positions; the
// rest stays in the residual and is added to the next step's gradient.
TEST(GradientEncoderTest, TopKSendsTheLargestAndCarriesTheRest) {
  const ParameterLayout layout = Layout();
  GradientEncoder enc(&layout, {.chunk_elems = 4, .fraction = 0.5});
  std::vector<float> g(17, 0.0f);
  g[0] = 0.1f, g[1] = -3.0f, g[2] = 0.2f, g[3] = 2.0f;
  GradientEncoder::Chunk c = enc.Encode(0, 0, 4, g.data(), 0, 1);
  EXPECT_EQ(Indices(c), (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(Values(c, WireEncoding::kFp32), (std::vector<float>{-3.0f, 2.0f}));
  EXPECT_FLOAT_EQ(enc.residual()[0], 0.1f);
  EXPECT_FLOAT_EQ(enc.residual()[1], 0.0f);
  EXPECT_FLOAT_EQ(enc.residual()[2], 0.2f);
  // Next step: g + r = {0.15, 0.05, 0.25, 0.05}.
  g[0] = 0.05f, g[1] = 0.05f, g[2] = 0.05f, g[3] = 0.05f;
  c = enc.Encode(0, 0, 4, g.data(), 1, 1);
  EXPECT_EQ(Indices(c), (std::vector<uint32_t>{0, 2}));
  const std::vector<float> v = Values(c, WireEncoding::kFp32);
  EXPECT_FLOAT_EQ(v[0], 0.15f);
  EXPECT_FLOAT_EQ(v[1], 0.25f);
  // At least one element of even the smallest chunk.
  c = enc.Encode(0, 16, 1, g.data(), 0, 1);
  EXPECT_EQ(Indices(c).size(), 1u);
  GradientEncoder tiny(&layout, {.chunk_elems = 4, .fraction = 0.01});
  EXPECT_EQ(Indices(tiny.Encode(0, 8, 4, g.data(), 0, 1)).size(), 1u);
}

// Warm-up: all of it at step 0, topk^(step / warmup) in between, topk
// from the warm-up's end on.
TEST(GradientEncoderTest, WarmUpKeepsAFallingFraction) {
  const ParameterLayout layout =
      *ParameterLayout::ForTensors({{"t", {1000}}}, 1, 1 << 20);
  GradientEncoder enc(
      &layout, {.chunk_elems = 1000, .fraction = 0.01, .warmup_steps = 100});
  std::vector<float> g(1000);
  for (int i = 0; i < 1000; ++i) g[i] = static_cast<float>(i % 17) - 8.5f;
  EXPECT_EQ(Indices(enc.Encode(0, 0, 1000, g.data(), 0, 1)).size(), 1000u);
  EXPECT_EQ(Indices(enc.Encode(0, 0, 1000, g.data(), 50, 1)).size(), 100u);
  EXPECT_EQ(Indices(enc.Encode(0, 0, 1000, g.data(), 100, 1)).size(), 10u);
  EXPECT_EQ(Indices(enc.Encode(0, 0, 1000, g.data(), 5000, 1)).size(), 10u);
}

// Momentum correction: u = 0.5 u + g, a = u + r; what is sent restarts
// at 0 in both u and r.
TEST(GradientEncoderTest, MomentumCorrectionKeepsTheVelocityOnTheWorker) {
  const ParameterLayout layout = Layout();
  GradientEncoder enc(&layout,
                      {.chunk_elems = 4, .fraction = 0.25, .momentum = 0.5f});
  std::vector<float> g(17, 0.0f);
  g[0] = 1.0f, g[1] = 4.0f;
  GradientEncoder::Chunk c = enc.Encode(0, 0, 4, g.data(), 0, 1);
  EXPECT_EQ(Indices(c), (std::vector<uint32_t>{1}));
  EXPECT_EQ(Values(c, WireEncoding::kFp32), (std::vector<float>{4.0f}));
  EXPECT_FLOAT_EQ(enc.residual()[0], 1.0f);  // u0 = 1, kept
  // Step 1, g = {1, 0}: u0 = 0.5 + 1 = 1.5, a0 = 1.5 + 1 = 2.5; u1 was
  // masked to 0, so a1 = 0.
  g[1] = 0.0f;
  c = enc.Encode(0, 0, 4, g.data(), 1, 1);
  EXPECT_EQ(Indices(c), (std::vector<uint32_t>{0}));
  EXPECT_EQ(Values(c, WireEncoding::kFp32), (std::vector<float>{2.5f}));
  EXPECT_FLOAT_EQ(enc.residual()[0], 0.0f);
  EXPECT_FLOAT_EQ(enc.residual()[1], 0.0f);
  // Step 2, g = 0: the velocity of 0 was masked too: nothing left.
  g[0] = 0.0f;
  c = enc.Encode(0, 0, 4, g.data(), 2, 1);
  EXPECT_EQ(Values(c, WireEncoding::kFp32), (std::vector<float>{0.0f}));
}

// Nothing is lost: over many steps, what was sent plus what is left equals
// the sum of the gradients, element by element (fp32 and bf16, whose
// rounding error carries in the residual; top-k and random-k).
TEST(GradientEncoderTest, SentPlusResidualIsTheSumOfTheGradients) {
  const ParameterLayout layout = Layout();
  for (auto sel : {GradientEncoder::Selection::kTopK,
                   GradientEncoder::Selection::kRandom})
  for (WireEncoding e : {WireEncoding::kFp32, WireEncoding::kBf16}) {
    GradientEncoder enc(&layout, {.chunk_elems = 4,
                                  .encoding = e,
                                  .fraction = 0.3,
                                  .selection = sel,
                                  .seed = 11});
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<double> sum(17, 0.0), sent(17, 0.0);
    std::vector<float> g(17);
    for (int step = 0; step < 50; ++step) {
      for (int i = 0; i < 17; ++i) sum[i] += g[i] = normal(rng);
      for (int32_t p = 0; p < 1; ++p) {
        const Partition& part = layout.partitions()[p];
        for (int64_t off = 0; off < part.size; off += 4) {
          const int64_t n = std::min<int64_t>(4, part.size - off);
          const GradientEncoder::Chunk c =
              enc.Encode(p, off, n, g.data(), step, 1);
          const std::vector<uint32_t> idx = Indices(c);
          const std::vector<float> v = Values(c, e);
          ASSERT_EQ(idx.size(), v.size());
          ASSERT_EQ(static_cast<int64_t>(idx.size()),
                    std::llround(0.3 * n) < 1 ? 1 : std::llround(0.3 * n));
          for (size_t j = 0; j < idx.size(); ++j) {
            ASSERT_LT(idx[j], n);
            if (j > 0) ASSERT_GT(idx[j], idx[j - 1]);
            sent[part.offset + off + idx[j]] += v[j];
          }
        }
      }
    }
    for (int i = 0; i < 17; ++i) {
      EXPECT_NEAR(sent[i] + enc.residual()[i], sum[i], 1e-4)
          << EncodingName(e) << " element " << i << " selection "
          << static_cast<int>(sel);
    }
  }
}

// Random-k: the positions are the seed's draw for (step, chunk), whatever
// the values (a zero is sent as readily as the largest), and the values
// sent are the gradient plus the residual there.
TEST(GradientEncoderTest, RandomKDrawsPositionsFromTheSeed) {
  const ParameterLayout layout =
      *ParameterLayout::ForTensors({{"t", {2000}}}, 1, 1 << 20);
  const auto kRandom = GradientEncoder::Selection::kRandom;
  const GradientEncoder::Options options{
      .chunk_elems = 1000, .fraction = 0.01, .selection = kRandom, .seed = 5};
  GradientEncoder enc(&layout, options);
  GradientEncoder::Options six = options;
  six.seed = 6;
  GradientEncoder other(&layout, six);
  std::vector<float> g(2000), zero(2000, 0.0f);
  for (int i = 0; i < 2000; ++i) g[i] = static_cast<float>(i);
  // Chunk 1 (the second 1,000 elements) at step 3.
  const GradientEncoder::Chunk c = enc.Encode(0, 1000, 1000, g.data(), 3, 1);
  std::vector<uint32_t> want;
  RandomKPositions(1000, 10, ChunkSeed(5, 3, 1), &want);
  EXPECT_EQ(Indices(c), want);
  std::vector<float> values;
  for (uint32_t i : want) values.push_back(1000.0f + i);
  EXPECT_EQ(Values(c, WireEncoding::kFp32), values);
  EXPECT_EQ(enc.residual()[1000 + want[0]], 0.0f);
  const uint32_t kept = want[0] == 0 ? 1 : 0;
  EXPECT_EQ(enc.residual()[1000 + kept], 1000.0f + kept);
  // Not the values' choice: an all-zero gradient draws the same positions
  // (another encoder, the same seed), and another seed draws others.
  GradientEncoder same(&layout, options);
  EXPECT_EQ(Indices(same.Encode(0, 1000, 1000, zero.data(), 3, 1)), want);
  EXPECT_NE(Indices(other.Encode(0, 1000, 1000, g.data(), 3, 1)), want);
  // Another step draws again; redoing step 3 in generation 2 draws step
  // 3's positions again.
  EXPECT_NE(Indices(enc.Encode(0, 1000, 1000, g.data(), 4, 1)), want);
  EXPECT_EQ(Indices(same.Encode(0, 1000, 1000, g.data(), 3, 2)), want);
}

// wire.sparse_min_bytes: a chunk below `whole_below` elements goes whole
// (every position) and keeps its velocity - momentum SGD there; larger
// chunks are sparsified and masked as before.
TEST(GradientEncoderTest, SmallChunksGoWholeAndKeepTheirMomentum) {
  const ParameterLayout layout = Layout();  // chunks of 4, 4, 4, 4 and 1
  GradientEncoder enc(&layout, {.chunk_elems = 4,
                                .fraction = 0.25,
                                .momentum = 0.5f,
                                .whole_below = 2});
  std::vector<float> g(17, 0.0f);
  g[0] = 4.0f, g[16] = 2.0f;
  // The 1-element chunk (below 2) and a 4-element one (k = 1).
  EXPECT_EQ(Indices(enc.Encode(0, 16, 1, g.data(), 0, 1)),
            (std::vector<uint32_t>{0}));
  EXPECT_EQ(Indices(enc.Encode(0, 0, 4, g.data(), 0, 1)),
            (std::vector<uint32_t>{0}));
  // Step 1, g = 0: the whole chunk sends its velocity 0.5 * 2 (momentum
  // SGD); the masked one's velocity restarted at 0, so it sends 0.
  std::fill(g.begin(), g.end(), 0.0f);
  EXPECT_EQ(Values(enc.Encode(0, 16, 1, g.data(), 1, 1), WireEncoding::kFp32),
            (std::vector<float>{1.0f}));
  EXPECT_EQ(Values(enc.Encode(0, 0, 4, g.data(), 1, 1), WireEncoding::kFp32),
            (std::vector<float>{0.0f}));
  EXPECT_EQ(enc.residual()[16], 0.0f) << "a whole chunk leaves nothing";
}

// A channel that sends a chunk again (a reconnect) gets the same bytes and
// the residual moves once; a step redone in a newer generation starts from
// the residual as it was before the step, as if the first attempt had
// never been.
TEST(GradientEncoderTest, ResendsRepeatAndRedoneStepsStartOver) {
  const ParameterLayout layout = Layout();
  GradientEncoder enc(&layout, {.chunk_elems = 4, .fraction = 0.25});
  GradientEncoder reference(&layout, {.chunk_elems = 4, .fraction = 0.25});
  std::vector<float> g0 = {1, 2, 3, 4}, g1 = {4, 3, 2, 1}, g1b = {0, 9, 1, 1};
  g0.resize(17), g1.resize(17), g1b.resize(17);
  enc.Encode(0, 0, 4, g0.data(), 0, 1);
  reference.Encode(0, 0, 4, g0.data(), 0, 1);
  const GradientEncoder::Chunk first = enc.Encode(0, 0, 4, g1.data(), 1, 1);
  const std::vector<float> r = enc.residual();
  const GradientEncoder::Chunk again = enc.Encode(0, 0, 4, g1.data(), 1, 1);
  EXPECT_EQ(again.data, first.data);
  EXPECT_EQ(Indices(again), Indices(first));
  EXPECT_EQ(enc.residual(), r) << "a resend moves nothing";
  // Generation 2 redoes step 1 with another gradient.
  const GradientEncoder::Chunk redo = enc.Encode(0, 0, 4, g1b.data(), 1, 2);
  const GradientEncoder::Chunk want = reference.Encode(0, 0, 4, g1b.data(), 1, 2);
  EXPECT_EQ(Indices(redo), Indices(want));
  EXPECT_EQ(Values(redo, WireEncoding::kFp32), Values(want, WireEncoding::kFp32));
  EXPECT_EQ(enc.residual(), reference.residual());
}

// Ties at the threshold: the first in order; a chunk holding a NaN or an
// infinity goes whole (the shard refuses it) and its residual restarts.
TEST(GradientEncoderTest, TiesTakeTheFirstAndNonFiniteChunksGoWhole) {
  const ParameterLayout layout = Layout();
  GradientEncoder enc(&layout, {.chunk_elems = 4, .fraction = 0.5});
  std::vector<float> g(17, 1.0f);
  EXPECT_EQ(Indices(enc.Encode(0, 0, 4, g.data(), 0, 1)),
            (std::vector<uint32_t>{0, 1}));
  g[5] = std::numeric_limits<float>::quiet_NaN();
  const GradientEncoder::Chunk c = enc.Encode(0, 4, 4, g.data(), 0, 1);
  EXPECT_TRUE(c.indices.empty());
  EXPECT_EQ(c.bytes, 16u);
  EXPECT_TRUE(std::isnan(Values(c, WireEncoding::kFp32)[1]));
  for (int i = 4; i < 8; ++i) EXPECT_EQ(enc.residual()[i], 0.0f);
}

}  // namespace
}  // namespace fulcrum
