#include "common/dataplane/randomk.h"

#include "common/hash/hash.h"

namespace fulcrum {

uint64_t ChunkSeed(uint64_t worker_seed, int64_t step, int64_t chunk) {
  uint64_t s = Mix64(worker_seed + kGoldenGamma);
  s = Mix64(s ^ (static_cast<uint64_t>(step) + kGoldenGamma));
  return Mix64(s ^ (static_cast<uint64_t>(chunk) + 2 * kGoldenGamma));
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
    // A uniform draw in [0, width): the high half of a 64 x 64 product
    // (Lemire's multiply-shift; the bias is below 2^-32 for these widths).
    const uint64_t draw = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(SplitMix64Next(&state)) * width) >>
        64);
    pos[j] = static_cast<uint32_t>(lo + draw);
    lo += width;
  }
}

}  // namespace fulcrum
