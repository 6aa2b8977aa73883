// Top-k selection for sparsified gradients (gradient_encoder.h): the
// positions of the k largest magnitudes of a run of floats, exactly, in
// about one pass. A strided random sample of 1,024 elements guesses a
// threshold safely below the k-th largest magnitude (the sample's
// (expected count + 4 standard deviations + slack)-th largest); one pass
// collects the elements at or above it (1.2-2.5 k of them, fewer the
// larger k), and the exact selection runs among those. When the guess was
// too high (fewer than k collected) the selection runs among all n - the
// same answer, slower. Small runs (n < 8,192) and large k (k > n / 2)
// select among all directly.
//
// Thread safety: a pure function (it uses thread-local scratch).
#ifndef FULCRUM_COMMON_DATAPLANE_TOPK_H_
#define FULCRUM_COMMON_DATAPLANE_TOPK_H_

#include <cstdint>
#include <vector>

namespace fulcrum {

// Sets *out to the positions of the k largest |a[i]| of a[0, n), ascending;
// of the elements tied at the k-th largest magnitude, the lowest positions.
// REQUIRES: 1 <= k <= n, every a[i] finite.
void TopKPositions(const float* a, int64_t n, int64_t k,
                   std::vector<uint32_t>* out);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_TOPK_H_
