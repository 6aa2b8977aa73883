// Random-k selection for sparsified gradients (gradient_encoder.h,
// wire.randomk): k positions of a run of n elements chosen without looking
// at the values - stratified: the run is cut into k strata of n / k
// elements (the first n % k one longer) and one position is drawn
// uniformly in each, so every element is picked with probability about
// k / n, the positions come out ascending and distinct, and the cost is
// O(k) whatever n. The draws are a pure function of `seed` (SplitMix64),
// so a caller that derives the seed from (worker, step, chunk) gets the
// same positions on every transport and when a step is encoded again.
//
// With error feedback (the encoder's residual) random-k is Stich et al.'s
// "rand-k with memory" (2018): unbiased without scaling, every element's
// share delayed rather than dropped.
//
// Thread safety: a pure function.
#ifndef FULCRUM_COMMON_DATAPLANE_RANDOMK_H_
#define FULCRUM_COMMON_DATAPLANE_RANDOMK_H_

#include <cstdint>
#include <vector>

namespace fulcrum {

// Sets *out to k positions of [0, n), ascending, one in each stratum.
// REQUIRES: 1 <= k <= n <= 2^32.
void RandomKPositions(int64_t n, int64_t k, uint64_t seed,
                      std::vector<uint32_t>* out);

// A seed for one chunk's draw: mixes the worker's seed, the step and the
// chunk's number (SplitMix64's finalizer over each in turn).
uint64_t ChunkSeed(uint64_t worker_seed, int64_t step, int64_t chunk);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_RANDOMK_H_
