#include "common/dataplane/topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// The definition: sort positions by (|a| descending, position ascending),
// take k, sort ascending.
std::vector<uint32_t> Reference(const std::vector<float>& a, int64_t k) {
  std::vector<uint32_t> pos(a.size());
  std::iota(pos.begin(), pos.end(), 0u);
  std::stable_sort(pos.begin(), pos.end(), [&](uint32_t x, uint32_t y) {
    return std::fabs(a[x]) > std::fabs(a[y]);
  });
  pos.resize(k);
  std::sort(pos.begin(), pos.end());
  return pos;
}

// Random runs small and large (the sampled path from 8,192 elements on),
// k from 1 to n, with heavy ties (values from a few levels) and without,
// a run whose largest values all sit in one place (a sample misses
// them: the guess is too high and the selection falls back), and one of
// zeros, subnormals and the largest finite values.
TEST(TopKTest, EqualsTheDefinition) {
  std::mt19937 rng(11);
  std::vector<uint32_t> got;
  for (int64_t n : {1, 7, 100, 5000, 8192, 16384, 100000, 262144}) {
    for (double fraction : {0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.6, 1.0}) {
      const int64_t k =
          std::clamp<int64_t>(std::llround(fraction * n), 1, n);
      for (int kind = 0; kind < 4; ++kind) {
        std::vector<float> a(n);
        std::normal_distribution<float> normal;
        // kind 3: the extremes of the magnitudes' bits (the radix select's
        // buckets) - zeros of both signs, subnormals, the largest finite.
        const float extremes[] = {0.0f, -0.0f, 1e-45f, -1e-40f, 1e-38f,
                                  3.4e38f, -3.4e38f, 1.0f, -1.0f};
        for (int64_t i = 0; i < n; ++i) {
          a[i] = kind == 1   ? static_cast<float>(static_cast<int>(rng() % 5) - 2)
                 : kind == 3 ? extremes[rng() % 9]
                             : normal(rng);
        }
        if (kind == 2) {  // the largest, packed at the end
          for (int64_t i = n - std::min<int64_t>(n, 3 * k); i < n; ++i)
            a[i] = 100.0f + static_cast<float>(i % 7);
        }
        TopKPositions(a.data(), n, k, &got);
        ASSERT_EQ(got, Reference(a, k))
            << "n " << n << " k " << k << " kind " << kind;
      }
    }
  }
}

}  // namespace
}  // namespace fulcrum
