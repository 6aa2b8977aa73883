#include "worker/backend/cpu_backend.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(CpuBackendTest, GemmAllTransposes) {
  CpuBackend b;
  // a = [[1,2,3],[4,5,6]] (2x3), bm = [[1,0],[0,1],[1,1]] (3x2)
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> bm = {1, 0, 0, 1, 1, 1};
  std::vector<float> c(4, 1.0f);
  b.Gemm(false, false, 2, 2, 3, 1.0f, a.data(), bm.data(), 0.0f, c.data());
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  // a^T (3x2) * a (2x3) = 3x3
  std::vector<float> ata(9);
  b.Gemm(true, false, 3, 3, 2, 1.0f, a.data(), a.data(), 0.0f, ata.data());
  EXPECT_EQ(ata, (std::vector<float>{17, 22, 27, 22, 29, 36, 27, 36, 45}));
  // a (2x3) * a^T (3x2) = 2x2, accumulated onto 1s with beta = 1
  std::vector<float> aat(4, 1.0f);
  b.Gemm(false, true, 2, 2, 3, 1.0f, a.data(), a.data(), 1.0f, aat.data());
  EXPECT_EQ(aat, (std::vector<float>{15, 33, 33, 78}));
}

// A block of a larger matrix, in place: the rest of c is untouched.
TEST(CpuBackendTest, StridedGemmComputesABlockInPlace) {
  CpuBackend b;
  // a = [[1,2,3],[4,5,6]] (2x3); its columns 1..2 transposed (2x2) times
  // e = [[1,1],[0,2]] into rows 1..2, columns 1..2 of a 3x4 c of 7s.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> e = {1, 1, 0, 2};
  std::vector<float> c(12, 7.0f);
  b.GemmStrided(true, false, 2, 2, 2, 1.0f, a.data() + 1, 3, e.data(), 2,
                0.0f, c.data() + 4 + 1, 4);
  // a[:,1:3]^T = [[2,5],[3,6]]; times e = [[2,12],[3,15]].
  EXPECT_EQ(c, (std::vector<float>{7, 7, 7, 7, 7, 2, 12, 7, 7, 3, 15, 7}));
}

TEST(CpuBackendTest, ElementwiseKernels) {
  CpuBackend b;
  std::vector<float> x = {-1, 2, 0.5f, -3};
  b.AddBias(2, 2, std::vector<float>{1, 1}.data(), x.data());
  EXPECT_EQ(x, (std::vector<float>{0, 3, 1.5f, -2}));
  b.Relu(4, x.data());
  EXPECT_EQ(x, (std::vector<float>{0, 3, 1.5f, 0}));
  std::vector<float> dy = {1, 1, 1, 1};
  b.ReluGrad(4, x.data(), dy.data());
  EXPECT_EQ(dy, (std::vector<float>{0, 1, 1, 0}));
  std::vector<float> db(2);
  b.BiasGrad(2, 2, std::vector<float>{1, 2, 3, 4}.data(), db.data());
  EXPECT_EQ(db, (std::vector<float>{4, 6}));
}

TEST(CpuBackendTest, SoftmaxCrossEntropy) {
  CpuBackend b;
  const std::vector<float> logits = {0, 0, 1000, 0};  // second row is extreme
  const std::vector<int32_t> labels = {1, 0};
  std::vector<float> d(4);
  const double loss =
      b.SoftmaxCrossEntropy(2, 2, logits.data(), labels.data(), 0.5f, d.data());
  EXPECT_NEAR(loss, std::log(2.0),
              1e-6);                // the second row is certain and right
  EXPECT_NEAR(d[0], 0.25f, 1e-6);   // (0.5 - 0) * 0.5
  EXPECT_NEAR(d[1], -0.25f, 1e-6);  // (0.5 - 1) * 0.5
  EXPECT_NEAR(d[2], 0.0f, 1e-6);    // (1 - 1) * 0.5
  EXPECT_NEAR(d[3], 0.0f, 1e-6);
  EXPECT_EQ(b.CountCorrect(2, 2, logits.data(), labels.data()), 1);
}

TEST(CpuBackendTest, SegmentSumGathersAndAddsInOrder) {
  CpuBackend b;
  const std::vector<float> src = {1, 2, 10, 20, 100, 200};  // 3 rows, dim 2
  // Segments: {0, 2} {} {1, 1, 1}
  const std::vector<int32_t> offsets = {0, 2, 2, 5};
  const std::vector<int32_t> index = {0, 2, 1, 1, 1};
  std::vector<float> out(6, -1.0f);
  b.SegmentSum(3, 2, offsets.data(), index.data(), src.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{101, 202, 0, 0, 30, 60}));
}

TEST(CpuBackendTest, SigmoidCrossEntropyIsStableAtExtremes) {
  CpuBackend b;
  const std::vector<float> z = {0, 100, -100, 2};
  const std::vector<float> y = {1, 1, 1, 0};
  std::vector<float> d(4);
  const double loss = b.SigmoidCrossEntropy(4, z.data(), y.data(), 0.5f,
                                            d.data());
  // log 2 + ~0 + 100 (a confident miss) + log(1 + e^2)
  EXPECT_NEAR(loss, std::log(2.0) + 100.0 + std::log1p(std::exp(2.0)), 1e-9);
  EXPECT_NEAR(d[0], -0.25f, 1e-7);  // (0.5 - 1) * 0.5
  EXPECT_NEAR(d[1], 0.0f, 1e-7);
  EXPECT_NEAR(d[2], -0.5f, 1e-7);
  EXPECT_NEAR(d[3], 0.5f / (1.0f + std::exp(-2.0f)), 1e-7);
  EXPECT_EQ(b.SigmoidCrossEntropy(4, z.data(), y.data(), 0.0f, nullptr), loss);
}

TEST(CpuBackendTest, PairDotsAndTheirGradient) {
  CpuBackend b;
  // One sample, n = 3 vectors of dim 2: rows (1,2), (3,4); last (5,6).
  const std::vector<float> rows = {1, 2, 3, 4}, last = {5, 6};
  std::vector<float> dots(3);
  b.PairDots(1, 3, 2, rows.data(), last.data(), dots.data());
  EXPECT_EQ(dots, (std::vector<float>{11, 17, 39}));  // (0,1) (0,2) (1,2)
  // d/dv of g . dots with g = (1, 2, 3): v0 gets 1 v1 + 2 v2, v1 1 v0 + 3 v2,
  // v2 2 v0 + 3 v1; added to what is there.
  const std::vector<float> g = {1, 2, 3};
  std::vector<float> d_rows(4, 1.0f), d_last(2, 0.0f);
  b.PairDotsGrad(1, 3, 2, rows.data(), last.data(), g.data(), d_rows.data(),
                 d_last.data());
  EXPECT_EQ(d_rows, (std::vector<float>{1 + 13, 1 + 16, 1 + 16, 1 + 20}));
  EXPECT_EQ(d_last, (std::vector<float>{11, 16}));
}

}  // namespace
}  // namespace fulcrum
