// What choosing a sparse chunk's positions costs a worker (issue 13, item
// 4; docs/benchmarks.md, "Random-k"): top-k (topk.h) against random-k
// (randomk.h) on a 1 MiB chunk (262,144 floats, the default chunk_bytes)
// at 1%, 10% and 25%, and a whole GradientEncoder::Encode of the chunk
// (residual update, selection, encoding) with each.
//
//   bazel run -c opt //bench:sparsify
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/dataplane/gradient_encoder.h"
#include "common/dataplane/randomk.h"
#include "common/dataplane/topk.h"
#include "common/tensor/layout.h"

namespace fulcrum {
namespace {

constexpr int64_t kChunk = 262144;

std::vector<float> Gradient() {
  std::vector<float> g(kChunk);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : g) x = normal(rng);
  return g;
}

void BM_TopKPositions(benchmark::State& state) {
  const std::vector<float> g = Gradient();
  const int64_t k = kChunk * state.range(0) / 100;
  std::vector<uint32_t> out;
  for (auto _ : state) {
    TopKPositions(g.data(), kChunk, k, &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kChunk * 4);
}
BENCHMARK(BM_TopKPositions)->Arg(1)->Arg(10)->Arg(25);

void BM_RandomKPositions(benchmark::State& state) {
  const int64_t k = kChunk * state.range(0) / 100;
  std::vector<uint32_t> out;
  uint64_t seed = 0;
  for (auto _ : state) {
    RandomKPositions(kChunk, k, ChunkSeed(7, seed++, 0), &out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * kChunk * 4);
}
BENCHMARK(BM_RandomKPositions)->Arg(1)->Arg(10)->Arg(25);

// Encode of a 1 MiB gradient (its layout's partitions, a chunk each), a
// new step each time (the residual moves).
void BM_Encode(benchmark::State& state) {
  const auto layout = ParameterLayout::ForTensors({{"t", {kChunk}}}, 1, 1 << 22);
  const std::vector<float> g = Gradient();
  GradientEncoder enc(
      &*layout, {.chunk_elems = kChunk,
                 .fraction = state.range(1) / 100.0,
                 .selection = state.range(0) == 0
                                  ? GradientEncoder::Selection::kTopK
                                  : GradientEncoder::Selection::kRandom,
                 .seed = 7});
  int64_t step = 0;
  for (auto _ : state) {
    for (size_t p = 0; p < layout->partitions().size(); ++p) {
      benchmark::DoNotOptimize(enc.Encode(static_cast<int32_t>(p), 0,
                                          layout->partitions()[p].size,
                                          g.data(), step, 1));
    }
    ++step;
  }
  state.SetBytesProcessed(state.iterations() * kChunk * 4);
  state.SetLabel(state.range(0) == 0 ? "topk" : "randomk");
}
BENCHMARK(BM_Encode)->ArgsProduct({{0, 1}, {1, 10, 25}});

}  // namespace
}  // namespace fulcrum

BENCHMARK_MAIN();
