#include "worker/model/mlp.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu_backend.h"

namespace fulcrum {
namespace {

// Loss of the model at `params` (double-checked through Evaluate's loss sum).
double MeanLoss(Mlp& mlp, const std::vector<float>& params,
                const std::vector<float>& x, const std::vector<int32_t>& labels,
                int batch) {
  double sum = 0;
  mlp.Evaluate(params.data(), x.data(), labels.data(), batch, &sum);
  return sum / batch;
}

TEST(MlpTest, GradientsMatchFiniteDifferences) {
  CpuBackend backend;
  auto layout = ParameterLayout::ForMlp({6, 5, 4, 3}, 1, 1 << 20);
  ASSERT_TRUE(layout.ok());
  const int batch = 4;
  Mlp mlp(&backend, *layout, batch);
  std::vector<float> params(layout->total_size());
  InitializeParameters(*layout, 3, 0, layout->total_size(), params.data());
  // Seed chosen so no hidden pre-activation lies within eps of the ReLU kink
  // (seed 5 puts one there and central differences are meaningless at it).
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  std::vector<float> x(batch * 6);
  for (float& v : x) v = normal(rng);
  const std::vector<int32_t> labels = {0, 2, 1, 2};
  std::vector<float> grads(layout->total_size(), 0.0f);
  std::vector<int64_t> ready;
  const double loss =
      mlp.ForwardBackward(params.data(), x.data(), labels.data(), batch,
                          grads.data(), [&](int64_t r) { ready.push_back(r); });
  EXPECT_NEAR(loss, MeanLoss(mlp, params, x, labels, batch), 1e-6);
  // Gradients become ready from the last layer to the first, each layer's
  // bias before its weight.
  const auto& t = layout->tensors();
  EXPECT_EQ(ready, (std::vector<int64_t>{t[5].offset, t[4].offset, t[3].offset,
                                         t[2].offset, t[1].offset, 0}));
  // Central differences in double-ish precision: eps large enough for float.
  const float eps = 1e-3f;
  int checked = 0;
  for (int64_t i = 0; i < layout->total_size(); ++i) {
    std::vector<float> p = params;
    p[i] = params[i] + eps;
    const double up = MeanLoss(mlp, p, x, labels, batch);
    p[i] = params[i] - eps;
    const double down = MeanLoss(mlp, p, x, labels, batch);
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(grads[i], numeric, 2e-3 + 2e-2 * std::abs(numeric))
        << "parameter " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
}

// A weight cut into several partitions is computed in blocks of rows, each
// partition reported as soon as it is final, and the gradient is that of
// the whole layer at once.
TEST(MlpTest, PartitionsInsideAWeightAreReadyOneByOne) {
  CpuBackend backend;
  // 300-element partitions: W0 (30 x 40) is cut at 300, 600 and 900, inside
  // rows 7, 15 and 22.
  auto cut = ParameterLayout::ForMlp({40, 30, 5}, 1, 300 * 4);
  auto whole = ParameterLayout::ForMlp({40, 30, 5}, 1, 1 << 20);
  ASSERT_TRUE(cut.ok() && whole.ok());
  ASSERT_GT(cut->partitions().size(), 4u);
  ASSERT_EQ(whole->partitions().size(), 1u);
  const int batch = 8;
  std::vector<float> params(cut->total_size());
  InitializeParameters(*cut, 3, 0, cut->total_size(), params.data());
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> x(batch * 40);
  for (float& v : x) v = normal(rng);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 4, 0, 1, 2};

  Mlp reference(&backend, *whole, batch);
  std::vector<float> expected(whole->total_size());
  reference.ForwardBackward(params.data(), x.data(), labels.data(), batch,
                            expected.data(), nullptr);

  Mlp mlp(&backend, *cut, batch);
  std::vector<float> grads(cut->total_size(), std::nanf(""));
  std::vector<int64_t> ready;
  mlp.ForwardBackward(params.data(), x.data(), labels.data(), batch,
                      grads.data(), [&](int64_t from) {
                        ready.push_back(from);
                        // Everything from `from` on is final already.
                        for (int64_t i = from; i < cut->total_size(); ++i)
                          ASSERT_NEAR(grads[i], expected[i], 1e-6)
                              << "element " << i << " at ready(" << from << ")";
                      });
  const auto& t = cut->tensors();
  EXPECT_EQ(ready, (std::vector<int64_t>{t[3].offset, t[2].offset,
                                         t[1].offset, 22 * 40, 15 * 40, 7 * 40,
                                         0}));
  for (size_t i = 0; i < grads.size(); ++i)
    EXPECT_NEAR(grads[i], expected[i], 1e-6) << "element " << i;
}

// The next step's first layer, computed block by block as its weights
// arrive, gives the step computed at once; a block waits for all of its
// weights (a partition boundary inside a row), and a step on other input
// ignores what was prepared.
TEST(MlpTest, APreparedStepMatchesTheStepComputedAtOnce) {
  CpuBackend backend;
  auto layout = ParameterLayout::ForMlp({40, 30, 5}, 1, 300 * 4);
  ASSERT_TRUE(layout.ok());
  const auto& parts = layout->partitions();
  ASSERT_GT(parts.size(), 4u);
  const int batch = 8;
  std::vector<float> params(layout->total_size());
  InitializeParameters(*layout, 5, 0, layout->total_size(), params.data());
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  std::vector<float> x(batch * 40), other(batch * 40);
  for (float& v : x) v = normal(rng);
  for (float& v : other) v = normal(rng);
  const std::vector<int32_t> labels = {4, 3, 2, 1, 0, 4, 3, 2};

  Mlp mlp(&backend, *layout, batch);
  std::vector<float> expected(layout->total_size());
  const double expected_loss =
      mlp.ForwardBackward(params.data(), x.data(), labels.data(), batch,
                          expected.data(), nullptr);

  mlp.Prepare(x.data(), batch);
  EXPECT_EQ(mlp.prepared_rows(), 0);
  // Blocks of rows [22, 30), [15, 22), [7, 15), [0, 7). Partition 3
  // (elements 900..1199) leaves [22, 30) short of row 22's first half
  // (880..899); partition 2 (600..899) completes it and holds [15, 22)
  // (600..879) whole; partition 4 (biases, second layer) adds no row.
  mlp.Arrived(params.data(), parts[3].offset, parts[3].size);
  EXPECT_EQ(mlp.prepared_rows(), 0);
  mlp.Arrived(params.data(), parts[2].offset, parts[2].size);
  EXPECT_EQ(mlp.prepared_rows(), 15);
  mlp.Arrived(params.data(), parts[4].offset, parts[4].size);
  EXPECT_EQ(mlp.prepared_rows(), 15);
  std::vector<float> grads(layout->total_size());
  const double loss = mlp.ForwardBackward(params.data(), x.data(),
                                          labels.data(), batch, grads.data(),
                                          nullptr);
  EXPECT_NEAR(loss, expected_loss, 1e-6);
  for (size_t i = 0; i < grads.size(); ++i)
    EXPECT_NEAR(grads[i], expected[i], 1e-6) << "element " << i;
  EXPECT_EQ(mlp.prepared_rows(), 0);  // used once

  // Prepared on `other`, stepped on x: what was prepared is not used.
  mlp.Prepare(other.data(), batch);
  for (const Partition& p : parts) mlp.Arrived(params.data(), p.offset, p.size);
  EXPECT_EQ(mlp.prepared_rows(), 30);
  std::fill(grads.begin(), grads.end(), 0.0f);
  EXPECT_NEAR(mlp.ForwardBackward(params.data(), x.data(), labels.data(),
                                  batch, grads.data(), nullptr),
              expected_loss, 1e-6);
  for (size_t i = 0; i < grads.size(); ++i)
    EXPECT_NEAR(grads[i], expected[i], 1e-6) << "element " << i;
}

TEST(MlpTest, LearnsASeparableProblem) {
  CpuBackend backend;
  auto layout = ParameterLayout::ForMlp({2, 8, 2}, 1, 1 << 20);
  ASSERT_TRUE(layout.ok());
  const int batch = 32;
  Mlp mlp(&backend, *layout, batch);
  std::vector<float> params(layout->total_size()), grads(layout->total_size());
  InitializeParameters(*layout, 1, 0, layout->total_size(), params.data());
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(batch * 2);
  std::vector<int32_t> y(batch);
  for (int step = 0; step < 300; ++step) {
    for (int r = 0; r < batch; ++r) {
      x[2 * r] = u(rng);
      x[2 * r + 1] = u(rng);
      y[r] = x[2 * r] + x[2 * r + 1] > 0 ? 1 : 0;
    }
    mlp.ForwardBackward(params.data(), x.data(), y.data(), batch, grads.data(),
                        nullptr);
    for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.5f * grads[i];
  }
  EXPECT_GE(mlp.Evaluate(params.data(), x.data(), y.data(), batch, nullptr),
            29);
}

}  // namespace
}  // namespace fulcrum
