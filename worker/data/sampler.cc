#include "worker/data/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/hash/hash.h"

namespace fulcrum {
namespace {

// Uniform in [0, bound) without modulo bias (Lemire's method with rejection).
uint64_t Below(uint64_t bound, uint64_t* state) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const unsigned __int128 m =
        static_cast<unsigned __int128>(SplitMix64Next(state)) * bound;
    if (static_cast<uint64_t>(m) >= threshold)
      return static_cast<uint64_t>(m >> 64);
  }
}

}  // namespace

void EpochOrder(uint64_t seed, int64_t epoch, int64_t n,
                std::vector<int64_t>* order) {
  order->resize(n);
  for (int64_t i = 0; i < n; ++i) (*order)[i] = i;
  uint64_t state =
      seed * 0x2545f4914f6cdd1dULL + static_cast<uint64_t>(epoch) + 1;
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap((*order)[i],
              (*order)[Below(static_cast<uint64_t>(i) + 1, &state)]);
  }
}

int64_t StepsPerEpoch(int64_t n, int world, int batch) {
  const int64_t global = static_cast<int64_t>(world) * batch;
  return (n + global - 1) / global;
}

Share WorkerShare(int64_t n, int64_t step_in_epoch, int rank, int world,
                  int batch) {
  const int64_t global = static_cast<int64_t>(world) * batch;
  const int64_t begin =
      std::min(n, step_in_epoch * global + static_cast<int64_t>(rank) * batch);
  const int64_t end = std::min(n, begin + batch);
  return {begin, end - begin};
}

BatchGatherer::BatchGatherer(const IdxImages& train) {
  double sum = 0, sum_sq = 0;
  for (uint8_t p : train.pixels) {
    const double v = p / 255.0;
    sum += v;
    sum_sq += v * v;
  }
  const double n = std::max<double>(1, train.pixels.size());
  const double mean = sum / n;
  const double std = std::sqrt(std::max(1e-12, sum_sq / n - mean * mean));
  for (int v = 0; v < 256; ++v)
    table_[v] = static_cast<float>((v / 255.0 - mean) / std);
}

void BatchGatherer::Gather(const IdxImages& images,
                           const std::vector<int32_t>& labels,
                           const int64_t* order, int64_t count, float* x,
                           int32_t* y) const {
  const int64_t pixels = static_cast<int64_t>(images.rows) * images.cols;
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* src = images.pixels.data() + order[r] * pixels;
    float* dst = x + r * pixels;
    for (int64_t i = 0; i < pixels; ++i) dst[i] = table_[src[i]];
    y[r] = labels[order[r]];
  }
}

void BatchGatherer::GatherRange(const IdxImages& images,
                                const std::vector<int32_t>& labels,
                                int64_t first, int64_t count, float* x,
                                int32_t* y) const {
  const int64_t pixels = static_cast<int64_t>(images.rows) * images.cols;
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* src = images.pixels.data() + (first + r) * pixels;
    float* dst = x + r * pixels;
    for (int64_t i = 0; i < pixels; ++i) dst[i] = table_[src[i]];
    y[r] = labels[first + r];
  }
}

}  // namespace fulcrum
