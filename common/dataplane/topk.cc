#include "common/dataplane/topk.h"

#include <algorithm>
#include <cmath>

namespace fulcrum {
namespace {

constexpr int64_t kSample = 1024;

// Grows a scratch vector, never shrinking it (no clearing on the way).
template <typename T>
T* Room(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// The k largest of the candidates (positions `pos`, ascending; null: all of
// a[0, m)), ties to the lowest positions, appended to *out in order.
void SelectAmong(const float* a, const uint32_t* pos, int64_t m, int64_t k,
                 std::vector<uint32_t>* out) {
  thread_local std::vector<float> scratch;
  float* const mags = Room(scratch, m);
  for (int64_t j = 0; j < m; ++j)
    mags[j] = std::fabs(a[pos == nullptr ? j : pos[j]]);
  std::nth_element(mags, mags + (m - k), mags + m);
  const float threshold = mags[m - k];
  int64_t ties = k;  // k less those strictly above (all after m - k)
  for (int64_t j = m - k + 1; j < m; ++j) ties -= mags[j] > threshold;
  for (int64_t j = 0; j < m; ++j) {
    const uint32_t i = pos == nullptr ? static_cast<uint32_t>(j) : pos[j];
    const float x = std::fabs(a[i]);
    if (x > threshold || (x == threshold && ties > 0)) {
      if (x == threshold) --ties;
      out->push_back(i);
    }
  }
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
  std::nth_element(sample, sample + (kSample - rank), sample + kSample);
  const float guess = sample[kSample - rank];
  // Branch-free compaction (a taken branch would mispredict at random).
  thread_local std::vector<uint32_t> candidates;
  uint32_t* const c = Room(candidates, n);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    c[m] = static_cast<uint32_t>(i);
    m += std::fabs(a[i]) >= guess;
  }
  if (m < k) {
    SelectAmong(a, nullptr, n, k, out);  // the guess was too high
    return;
  }
  SelectAmong(a, c, m, k, out);
}

}  // namespace fulcrum
