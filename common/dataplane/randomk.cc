#include "common/dataplane/randomk.h"

namespace fulcrum {
namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

}  // namespace

uint64_t ChunkSeed(uint64_t worker_seed, int64_t step, int64_t chunk) {
  uint64_t s = Mix(worker_seed + kGolden);
  s = Mix(s ^ (static_cast<uint64_t>(step) + kGolden));
  return Mix(s ^ (static_cast<uint64_t>(chunk) + 2 * kGolden));
}

void RandomKPositions(int64_t n, int64_t k, uint64_t seed,
                      std::vector<uint32_t>* out) {
  out->resize(k);
  uint32_t* const pos = out->data();
  // Strata of n / k elements, the first n % k of them one longer.
  const uint64_t base = static_cast<uint64_t>(n / k);
  const int64_t longer = n % k;
  uint64_t state = seed;
  uint64_t lo = 0;
  for (int64_t j = 0; j < k; ++j) {
    const uint64_t width = base + (j < longer ? 1 : 0);
    state += kGolden;
    // A uniform draw in [0, width): the high half of a 64 x 64 product
    // (Lemire's multiply-shift; the bias is below 2^-32 for these widths).
    const uint64_t draw = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(Mix(state)) * width) >> 64);
    pos[j] = static_cast<uint32_t>(lo + draw);
    lo += width;
  }
}

}  // namespace fulcrum
