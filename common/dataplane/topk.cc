#include "common/dataplane/topk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fulcrum {
namespace {

constexpr int64_t kSample = 1024;

// Grows a scratch vector, never shrinking it (no clearing on the way).
template <typename T>
T* Room(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// |x|'s bits: for finite x (and +-0), ordered as |x| is.
inline uint32_t MagnitudeBits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits & 0x7fffffffu;
}

// The k-th largest of mags[0, m) (finite, >= 0; reordered), and how many
// of the k largest equal it (the rest are above it). Radix select on the
// magnitudes' bits (a finite magnitude's bits order as it does): a
// histogram of bits [20, 31) finds the bucket of the k-th largest, its
// members move to the front, and bits [10, 20) and then [0, 10) do the
// same among them while more than 64 are left; nth_element picks among
// the last few. (nth_element over all m mispredicted a branch about every
// other element: most of the selection's time.)
float KthLargest(float* mags, int64_t m, int64_t k, int64_t* ties) {
  int64_t above = 0;  // strictly above the survivors
  int64_t w = m;      // survivors: mags[0, w)
  constexpr int kShift[3] = {20, 10, 0};
  for (int level = 0; level < 3 && w > 64; ++level) {
    const int shift = kShift[level];
    const uint32_t mask = level == 0 ? 0x7ffu : 0x3ffu;
    uint32_t hist[0x800] = {};
    for (int64_t j = 0; j < w; ++j)
      ++hist[(MagnitudeBits(mags[j]) >> shift) & mask];
    uint32_t b = mask;
    while (above + hist[b] < k) above += hist[b--];
    int64_t v = 0;  // bucket b's members to the front (v <= j: in place)
    for (int64_t j = 0; j < w; ++j) {
      const float x = mags[j];
      mags[v] = x;
      v += ((MagnitudeBits(x) >> shift) & mask) == b;
    }
    w = v;
  }
  const int64_t rank = k - above;  // the k-th largest: the survivors' rank-th
  std::nth_element(mags, mags + (w - rank), mags + w);
  const float kth = mags[w - rank];
  int64_t greater = above;
  for (int64_t j = w - rank + 1; j < w; ++j) greater += mags[j] > kth;
  *ties = k - greater;
  return kth;
}

// The k largest of the candidates (positions `pos`, ascending; null: all of
// a[0, m)), ties to the lowest positions, into *out (k of them, in order).
void SelectAmong(const float* a, const uint32_t* pos, int64_t m, int64_t k,
                 std::vector<uint32_t>* out) {
  thread_local std::vector<float> scratch;
  float* const mags = Room(scratch, m);
  for (int64_t j = 0; j < m; ++j)
    mags[j] = std::fabs(a[pos == nullptr ? j : pos[j]]);
  int64_t ties = 0;  // of the k, those equal to the threshold
  const float threshold = KthLargest(mags, m, k, &ties);
  out->resize(k);
  uint32_t* const o = out->data();
  int64_t w = 0;
  // Branch-free: o[w] = i, w += taken (about k of m taken, at random).
  for (int64_t j = 0; j < m && w < k; ++j) {
    const uint32_t i = pos == nullptr ? static_cast<uint32_t>(j) : pos[j];
    const float x = std::fabs(a[i]);
    const bool tie = x == threshold && ties > 0;
    o[w] = i;
    w += (x > threshold) | tie;
    ties -= tie;
  }
}

// The positions i of a[0, n) with |a[i]| >= guess, ascending, into c (room
// for n); their count. Branch-free (a taken branch would mispredict at
// random): with SSE2 (every x86-64) four elements at a time - a compare,
// its 4-bit mask, and the mask's set lanes packed left from a table and
// stored at once (the serial c[m] = i, m += ... took ~1.5 cycles an
// element, most of the selection's time).
int64_t Candidates(const float* a, int64_t n, float guess, uint32_t* c) {
  int64_t m = 0;
  int64_t i = 0;
#if defined(__SSE2__)
  // kPack[mask]: the set lanes of a 4-bit mask, in order, packed left.
  alignas(16) static constexpr uint32_t kPack[16][4] = {
      {0, 0, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0},
      {2, 0, 0, 0}, {0, 2, 0, 0}, {1, 2, 0, 0}, {0, 1, 2, 0},
      {3, 0, 0, 0}, {0, 3, 0, 0}, {1, 3, 0, 0}, {0, 1, 3, 0},
      {2, 3, 0, 0}, {0, 2, 3, 0}, {1, 2, 3, 0}, {0, 1, 2, 3}};
  static constexpr uint8_t kCount[16] = {0, 1, 1, 2, 1, 2, 2, 3,
                                         1, 2, 2, 3, 2, 3, 3, 4};
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  const __m128 threshold = _mm_set1_ps(guess);
  // c + m + 4 <= c + i + 4 <= c + n: the 4-wide store stays in the room.
  for (; i + 4 <= n; i += 4) {
    const __m128 mag = _mm_and_ps(_mm_loadu_ps(a + i), abs_mask);
    const int mask = _mm_movemask_ps(_mm_cmpge_ps(mag, threshold));
    const __m128i lanes =
        _mm_load_si128(reinterpret_cast<const __m128i*>(kPack[mask]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c + m),
                     _mm_add_epi32(lanes, _mm_set1_epi32(static_cast<int>(i))));
    m += kCount[mask];
  }
#endif
  for (; i < n; ++i) {
    c[m] = static_cast<uint32_t>(i);
    m += std::fabs(a[i]) >= guess;
  }
  return m;
}

}  // namespace

void TopKPositions(const float* a, int64_t n, int64_t k,
                   std::vector<uint32_t>* out) {
  out->clear();
  if (n < 8 * kSample || k > n / 2) {
    SelectAmong(a, nullptr, n, k, out);
    return;
  }
  // One element from each of kSample strata, at a pseudo-random place in
  // it (a fixed sequence: the same gradient selects the same way).
  thread_local std::vector<float> samples;
  float* const sample = Room(samples, kSample);
  const int64_t stratum = n / kSample;
  uint64_t rng = 0x9e3779b97f4a7c15ULL;
  for (int64_t j = 0; j < kSample; ++j) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    sample[j] = std::fabs(a[j * stratum + static_cast<int64_t>((rng >> 33) % stratum)]);
  }
  // Expected count above the k-th largest in the sample, plus four of its
  // standard deviations (about sqrt(expect)) and slack for small k: the
  // guess falls below the k-th largest but for about 1 draw in 30,000,
  // and the candidates stay near k (k = n / 10: ~1.6 k).
  const int64_t expect = (kSample * k + n - 1) / n;
  const int64_t spread = static_cast<int64_t>(
      std::ceil(std::sqrt(static_cast<double>(expect))));
  const int64_t rank = std::min<int64_t>(kSample, expect + 4 * spread + 16);
  int64_t unused_ties;
  const float guess = KthLargest(sample, kSample, rank, &unused_ties);
  thread_local std::vector<uint32_t> candidates;
  uint32_t* const c = Room(candidates, n);
  const int64_t m = Candidates(a, n, guess, c);
  if (m < k) {
    SelectAmong(a, nullptr, n, k, out);  // the guess was too high
    return;
  }
  SelectAmong(a, c, m, k, out);
}

}  // namespace fulcrum
