#include "common/dataplane/randomk.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// k ascending, distinct positions in [0, n), one in each stratum (the
// first n % k strata one element longer).
void ExpectStratified(int64_t n, int64_t k, const std::vector<uint32_t>& p) {
  ASSERT_EQ(static_cast<int64_t>(p.size()), k);
  int64_t lo = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t width = n / k + (j < n % k ? 1 : 0);
    EXPECT_GE(p[j], lo) << "position " << j;
    EXPECT_LT(p[j], lo + width) << "position " << j;
    lo += width;
  }
  EXPECT_EQ(lo, n);
}

TEST(RandomKTest, OnePositionInEachStratum) {
  std::vector<uint32_t> p;
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {10, 1}, {10, 3}, {10, 10}, {1000, 7}, {262144, 2621}}) {
    for (uint64_t seed : {0ull, 1ull, 0xdeadbeefull}) {
      RandomKPositions(n, k, seed, &p);
      ExpectStratified(n, k, p);
    }
  }
}

TEST(RandomKTest, APureFunctionOfTheSeed) {
  std::vector<uint32_t> a, b, c;
  RandomKPositions(100000, 1000, 7, &a);
  RandomKPositions(100000, 1000, 7, &b);
  RandomKPositions(100000, 1000, 8, &c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The chunk seed tells workers, steps and chunks apart.
  std::set<uint64_t> seeds;
  for (uint64_t w : {1ull, 2ull})
    for (int64_t step : {0, 1, 2})
      for (int64_t chunk : {0, 1, 2}) seeds.insert(ChunkSeed(w, step, chunk));
  EXPECT_EQ(seeds.size(), 18u);
  EXPECT_EQ(ChunkSeed(1, 2, 3), ChunkSeed(1, 2, 3));
}

// Every element is drawn about k / n of the time: over 4,000 draws of 10
// of 100 each position's count is 400 +- 25% (a binomial's standard
// deviation there is 19; 100 is five of them). A draw that favoured one
// end of its stratum (a modulo bias, a low-bit generator) fails it.
TEST(RandomKTest, EveryPositionAboutEquallyOften) {
  std::vector<int> count(100, 0);
  std::vector<uint32_t> p;
  for (uint64_t d = 0; d < 4000; ++d) {
    RandomKPositions(100, 10, ChunkSeed(3, static_cast<int64_t>(d), 0), &p);
    for (uint32_t i : p) ++count[i];
  }
  for (int i = 0; i < 100; ++i) {
    EXPECT_GT(count[i], 300) << "position " << i;
    EXPECT_LT(count[i], 500) << "position " << i;
  }
}

}  // namespace
}  // namespace fulcrum
