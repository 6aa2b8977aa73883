// CudaBackend against CpuBackend, kernel by kernel and for a whole training
// step. On a machine without a GPU every comparison skips with "no CUDA
// device" (and one test checks that Create says exactly that).
#include "worker/backend/cuda_backend.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/tensor/layout.h"
#include "gtest/gtest.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/bag_index.h"
#include "worker/model/embedding_mlp.h"
#include "worker/model/mlp.h"

namespace fulcrum {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed, float lo = -1.0f,
                          float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// max |a - b| / max(|b|, 1): relative error with an absolute floor at 1.
double MaxRelError(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - b[i]) /
                                std::max(1.0, std::abs(double{b[i]})));
  }
  return worst;
}

TEST(CudaBackendCreateTest, SaysNoCudaDeviceWhereThereIsNone) {
  if (CudaBackend::DeviceCount() > 0) {
    auto bad = CudaBackend::Create({.device = CudaBackend::DeviceCount()});
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("device"), std::string::npos);
    return;
  }
  auto none = CudaBackend::Create({});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("no CUDA device"), std::string::npos);
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaBackend::DeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    auto created = CudaBackend::Create({});
    ASSERT_TRUE(created.ok()) << created.status();
    gpu_ = std::move(*created);
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      EXPECT_TRUE(gpu_->status().ok()) << gpu_->status();
    }
  }

  // Device copy of `host`, freed with the fixture.
  float* Up(const std::vector<float>& host) {
    float* d = gpu_->Allocate(static_cast<int64_t>(host.size()));
    gpu_->CopyToDevice(host.data(), d, static_cast<int64_t>(host.size()));
    owned_.push_back(d);
    return d;
  }
  std::vector<float> Down(const float* d, int64_t n) {
    std::vector<float> host(n);
    gpu_->CopyToHost(d, host.data(), n);
    return host;
  }
  int32_t* UpIndices(const std::vector<int32_t>& host) {
    int32_t* d = gpu_->AllocateIndices(static_cast<int64_t>(host.size()));
    gpu_->CopyIndicesToDevice(host.data(), d,
                              static_cast<int64_t>(host.size()));
    owned_indices_.push_back(d);
    return d;
  }
  ~CudaBackendTest() override {
    for (float* p : owned_) gpu_->Free(p);
    for (int32_t* p : owned_indices_) gpu_->FreeIndices(p);
  }

  CpuBackend cpu_;
  std::unique_ptr<CudaBackend> gpu_;
  std::vector<float*> owned_;
  std::vector<int32_t*> owned_indices_;
};

// Zipf-like ids (a few hot ones, a long tail), `per_bag` to a bag.
BagIndex RandomBags(int bags, int per_bag, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<uint64_t> ids;
  std::vector<int32_t> offsets = {0};
  for (int b = 0; b < bags; ++b) {
    for (int j = 0; j < per_bag; ++j)
      ids.push_back(static_cast<uint64_t>(std::pow(100000.0, u(rng))));
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  BagIndexer indexer;
  BagIndex index;
  EXPECT_TRUE(indexer.Build(ids, offsets, &index).ok());
  return index;
}

// Out of device memory is a status, not an abort: null and a sticky
// RESOURCE_EXHAUSTED (the H200 has ~141 GB; this asks for 4 PB).
TEST_F(CudaBackendTest, AllocationBeyondTheDeviceIsAStatusNotAnAbort) {
  auto own = CudaBackend::Create({});  // its status turns bad, not gpu_'s
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ((*own)->Allocate(int64_t{1} << 50), nullptr);
  EXPECT_EQ((*own)->status().code(), absl::StatusCode::kResourceExhausted)
      << (*own)->status();
  EXPECT_EQ((*own)->AllocateIndices(int64_t{1} << 50), nullptr);
  // The failures leave no error behind for the next kernel of this thread
  // to report as its own (a softmax did, on an H200).
  std::vector<int32_t> labels = {1, 0};
  float* logits = Up({0.0f, 1.0f, 2.0f, 0.0f});
  float* dlogits = Up({0.0f, 0.0f, 0.0f, 0.0f});
  EXPECT_GT(gpu_->SoftmaxCrossEntropy(2, 2, logits, labels.data(), 1.0f,
                                      dlogits),
            0.0);
  EXPECT_TRUE(gpu_->status().ok()) << gpu_->status();
}

TEST_F(CudaBackendTest, GemmMatchesTheCpuInEveryTransposition) {
  const int m = 37, n = 29, k = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const auto a = Random(m * k, 1), b = Random(k * n, 2),
                 c0 = Random(m * n, 3);
      std::vector<float> want = c0;
      cpu_.Gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 0.25f, want.data());
      float* c = Up(c0);
      gpu_->Gemm(ta, tb, m, n, k, 0.5f, Up(a), Up(b), 0.25f, c);
      EXPECT_LE(MaxRelError(Down(c, m * n), want), 1e-4)
          << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

// Blocks of larger matrices (what a layer split at partitions computes).
TEST_F(CudaBackendTest, StridedGemmMatchesTheCpuOnBlocks) {
  const int m = 13, n = 11, k = 17, ld = 40;  // inside 40-wide matrices
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const auto a = Random(ld * ld, 1), b = Random(ld * ld, 2),
                 c0 = Random(ld * ld, 3);
      std::vector<float> want = c0;
      const int off = 3 * ld + 5;
      cpu_.GemmStrided(ta, tb, m, n, k, 0.5f, a.data() + off, ld,
                       b.data() + off, ld, 0.25f, want.data() + off, ld);
      float* c = Up(c0);
      gpu_->GemmStrided(ta, tb, m, n, k, 0.5f, Up(a) + off, ld, Up(b) + off,
                        ld, 0.25f, c + off, ld);
      EXPECT_LE(MaxRelError(Down(c, ld * ld), want), 1e-4)
          << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST_F(CudaBackendTest, Tf32GemmIsWithinItsLooserTolerance) {
  auto tf32 = CudaBackend::Create({.device = 0, .tf32 = true});
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  const int m = 64, n = 64, k = 256;
  const auto a = Random(m * k, 4), b = Random(k * n, 5);
  std::vector<float> want(m * n, 0.0f);
  cpu_.Gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, want.data());
  float* da = (*tf32)->Allocate(m * k);
  float* db = (*tf32)->Allocate(k * n);
  float* dc = (*tf32)->Allocate(m * n);
  (*tf32)->CopyToDevice(a.data(), da, m * k);
  (*tf32)->CopyToDevice(b.data(), db, k * n);
  (*tf32)->Gemm(false, false, m, n, k, 1.0f, da, db, 0.0f, dc);
  std::vector<float> got(m * n);
  (*tf32)->CopyToHost(dc, got.data(), m * n);
  // TF32 keeps 10 mantissa bits: sums of 256 products agree to ~1e-2.
  EXPECT_LE(MaxRelError(got, want), 1e-2);
  (*tf32)->Free(da);
  (*tf32)->Free(db);
  (*tf32)->Free(dc);
}

TEST_F(CudaBackendTest, BiasReluAndTheirGradients) {
  const int rows = 70, cols = 45;
  const auto x0 = Random(rows * cols, 6), bias = Random(cols, 7);
  std::vector<float> want = x0;
  cpu_.AddBias(rows, cols, bias.data(), want.data());
  float* x = Up(x0);
  gpu_->AddBias(rows, cols, Up(bias), x);
  EXPECT_LE(MaxRelError(Down(x, rows * cols), want), 1e-6);

  std::vector<float> db_want(cols);
  cpu_.BiasGrad(rows, cols, x0.data(), db_want.data());
  float* db = Up(std::vector<float>(cols, 0.0f));
  gpu_->BiasGrad(rows, cols, Up(x0), db);
  EXPECT_LE(MaxRelError(Down(db, cols), db_want), 1e-5);

  std::vector<float> relu_want = x0;
  cpu_.Relu(rows * cols, relu_want.data());
  float* r = Up(x0);
  gpu_->Relu(rows * cols, r);
  EXPECT_EQ(Down(r, rows * cols), relu_want);

  const auto dy0 = Random(rows * cols, 8);
  std::vector<float> dy_want = dy0;
  cpu_.ReluGrad(rows * cols, relu_want.data(), dy_want.data());
  float* dy = Up(dy0);
  gpu_->ReluGrad(rows * cols, r, dy);
  EXPECT_EQ(Down(dy, rows * cols), dy_want);
}

TEST_F(CudaBackendTest, SoftmaxCrossEntropyAndAccuracy) {
  const int rows = 100, cols = 10;
  const auto z = Random(rows * cols, 9, -4.0f, 4.0f);
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % cols;
  std::vector<float> dz_want(rows * cols);
  const double loss_want = cpu_.SoftmaxCrossEntropy(
      rows, cols, z.data(), labels.data(), 1.0f / rows, dz_want.data());
  float* dz = Up(std::vector<float>(rows * cols, 0.0f));
  float* dzl = Up(z);
  const double loss =
      gpu_->SoftmaxCrossEntropy(rows, cols, dzl, labels.data(), 1.0f / rows, dz);
  EXPECT_NEAR(loss, loss_want, 1e-6 * std::abs(loss_want));
  EXPECT_LE(MaxRelError(Down(dz, rows * cols), dz_want), 1e-6);
  EXPECT_EQ(gpu_->CountCorrect(rows, cols, dzl, labels.data()),
            cpu_.CountCorrect(rows, cols, z.data(), labels.data()));
}

TEST_F(CudaBackendTest, AsyncCopiesDeliverWhatComputeProduced) {
  const int n = 1 << 16;
  float* x = Up(Random(n, 10));
  std::vector<float> host(n, 0.0f);
  gpu_->RegisterHost(host.data(), n);
  gpu_->Relu(n, x);  // queued on the compute stream
  const int ticket = gpu_->CopyToHostAsync(x, host.data(), n);
  gpu_->WaitCopy(ticket);
  std::vector<float> want = Random(n, 10);
  cpu_.Relu(n, want.data());
  EXPECT_EQ(host, want);
  gpu_->UnregisterHost(host.data());
}

TEST_F(CudaBackendTest, AsyncCopiesToTheDeviceLandBeforeLaterCompute) {
  const int n = 1 << 16;
  float* x = Up(std::vector<float>(n, -1.0f));
  const std::vector<float> next = Random(n, 12);
  std::vector<float> host = next;
  gpu_->RegisterHost(host.data(), n);
  // Two halves, as partitions arrive; compute queued after the fence sees
  // both.
  gpu_->CopyToDeviceAsync(host.data(), x, n / 2);
  gpu_->CopyToDeviceAsync(host.data() + n / 2, x + n / 2, n - n / 2);
  gpu_->ComputeWaitsForCopies();
  gpu_->Relu(n, x);
  std::vector<float> want = next;
  cpu_.Relu(n, want.data());
  EXPECT_EQ(Down(x, n), want);
  gpu_->UnregisterHost(host.data());
}

TEST_F(CudaBackendTest, AWholeTrainingStepMatchesTheCpu) {
  auto layout = ParameterLayout::ForMlp({784, 256, 128, 10}, 2, 1 << 20);
  ASSERT_TRUE(layout.ok());
  const int64_t total = layout->total_size();
  std::vector<float> params(total);
  InitializeParameters(*layout, 1, 0, total, params.data());
  const int batch = 64;
  const auto x = Random(int64_t{batch} * 784, 11, 0.0f, 1.0f);
  std::vector<int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = i % 10;

  Mlp cpu_mlp(&cpu_, *layout, batch);
  std::vector<float> cpu_grads(total);
  const double cpu_loss = cpu_mlp.ForwardBackward(
      params.data(), x.data(), y.data(), batch, cpu_grads.data(),
      [](int64_t) {});

  Mlp gpu_mlp(gpu_.get(), *layout, batch);
  float* grads = Up(std::vector<float>(total, 0.0f));
  std::vector<int64_t> ready;
  const double gpu_loss = gpu_mlp.ForwardBackward(
      Up(params), Up(x), y.data(), batch, grads,
      [&ready](int64_t from) { ready.push_back(from); });
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-4 * std::abs(cpu_loss));
  EXPECT_LE(MaxRelError(Down(grads, total), cpu_grads), 1e-4);
  ASSERT_FALSE(ready.empty());
  EXPECT_EQ(ready.back(), 0) << "every gradient reported ready";
}

// Gather (bags of rows) and scatter-add (rows from bags) against the CPU:
// the same additions in the same order, so bit for bit equal.
TEST_F(CudaBackendTest, SegmentSumGathersAndScatterAddsLikeTheCpu) {
  for (int dim : {1, 8, 16, 33, 128}) {
    const BagIndex x = RandomBags(4096, 3, dim);
    const auto rows = Random(int64_t{x.rows()} * dim, 21);
    std::vector<float> bags_cpu(int64_t{x.bags()} * dim);
    cpu_.SegmentSum(x.bags(), dim, x.bag_offsets.data(), x.bag_rows.data(),
                    rows.data(), bags_cpu.data());
    float* bags = Up(std::vector<float>(bags_cpu.size(), -7.0f));
    gpu_->SegmentSum(x.bags(), dim, UpIndices(x.bag_offsets),
                     UpIndices(x.bag_rows), Up(rows), bags);
    EXPECT_EQ(Down(bags, bags_cpu.size()), bags_cpu) << "gather, dim " << dim;

    const auto dbags = Random(int64_t{x.bags()} * dim, 22);
    std::vector<float> grads_cpu(rows.size());
    cpu_.SegmentSum(x.rows(), dim, x.row_offsets.data(), x.row_bags.data(),
                    dbags.data(), grads_cpu.data());
    float* grads = Up(std::vector<float>(rows.size(), -7.0f));
    gpu_->SegmentSum(x.rows(), dim, UpIndices(x.row_offsets),
                     UpIndices(x.row_bags), Up(dbags), grads);
    EXPECT_EQ(Down(grads, grads_cpu.size()), grads_cpu)
        << "scatter-add, dim " << dim;
  }
}

TEST_F(CudaBackendTest, PairDotsAndTheirGradientMatchTheCpu) {
  const int batch = 300, n = 27, dim = 16;
  const auto rows = Random(int64_t{batch} * (n - 1) * dim, 51);
  const auto last = Random(int64_t{batch} * dim, 52);
  const int64_t pairs = int64_t{batch} * n * (n - 1) / 2;
  std::vector<float> dots_cpu(pairs);
  cpu_.PairDots(batch, n, dim, rows.data(), last.data(), dots_cpu.data());
  float* dots = Up(std::vector<float>(pairs, 0.0f));
  float* rows_dev = Up(rows);
  float* last_dev = Up(last);
  gpu_->PairDots(batch, n, dim, rows_dev, last_dev, dots);
  EXPECT_LE(MaxRelError(Down(dots, pairs), dots_cpu), 1e-5);
  const auto g = Random(pairs, 53);
  std::vector<float> d_rows_cpu(rows.size(), 0.5f), d_last_cpu(last.size(), 0.5f);
  cpu_.PairDotsGrad(batch, n, dim, rows.data(), last.data(), g.data(),
                    d_rows_cpu.data(), d_last_cpu.data());
  float* d_rows = Up(std::vector<float>(rows.size(), 0.5f));
  float* d_last = Up(std::vector<float>(last.size(), 0.5f));
  gpu_->PairDotsGrad(batch, n, dim, rows_dev, last_dev, Up(g), d_rows, d_last);
  EXPECT_LE(MaxRelError(Down(d_rows, rows.size()), d_rows_cpu), 1e-5);
  EXPECT_LE(MaxRelError(Down(d_last, last.size()), d_last_cpu), 1e-5);
}

TEST_F(CudaBackendTest, SigmoidCrossEntropyMatchesTheCpu) {
  const int n = 5000;
  auto z = Random(n, 31, -30.0f, 30.0f);
  z[0] = 90.0f;  // extremes stay finite
  z[1] = -90.0f;
  std::vector<float> y(n);
  for (int i = 0; i < n; ++i) y[i] = (i * 7919) % 3 == 0 ? 1.0f : 0.0f;
  std::vector<float> d_cpu(n);
  const double want = cpu_.SigmoidCrossEntropy(n, z.data(), y.data(),
                                               1.0f / n, d_cpu.data());
  float* d = Up(std::vector<float>(n, 0.0f));
  const double got =
      gpu_->SigmoidCrossEntropy(n, Up(z), y.data(), 1.0f / n, d);
  EXPECT_NEAR(got, want, 1e-9 * want);
  EXPECT_LE(MaxRelError(Down(d, n), d_cpu), 1e-6);
}

// The recommender model's whole step (issue 14) against the CPU: bags,
// bottom and top MLPs, logistic loss, dense and row gradients.
class CudaEmbeddingMlpTest : public CudaBackendTest,
                             public ::testing::WithParamInterface<bool> {};

TEST_P(CudaEmbeddingMlpTest, AnEmbeddingMlpStepMatchesTheCpu) {
  const EmbeddingMlpShape shape{.fields = 26, .dense = 13, .dim = 16,
                                .bottom = {64, 16}, .top = {128, 64},
                                .dot = GetParam()};
  auto tensors = EmbeddingMlpTensors(shape);
  ASSERT_TRUE(tensors.ok());
  auto layout = ParameterLayout::ForTensors(*tensors, 2, 1 << 20);
  ASSERT_TRUE(layout.ok());
  const int64_t total = layout->total_size();
  std::vector<float> params(total);
  InitializeParameters(*layout, 1, 0, total, params.data());
  const int batch = 512;
  const BagIndex x = RandomBags(batch * shape.fields, 1, 41);
  const auto rows = Random(int64_t{x.rows()} * shape.dim, 42, -0.1f, 0.1f);
  const auto dense = Random(int64_t{batch} * shape.dense, 43, 0.0f, 3.0f);
  std::vector<float> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 4 == 0 ? 1.0f : 0.0f;

  EmbeddingMlp::Batch b;
  b.size = batch;
  b.labels = labels.data();
  b.rows = x.rows();
  b.dense = dense.data();
  b.row_values = rows.data();
  b.bag_offsets = x.bag_offsets.data();
  b.bag_rows = x.bag_rows.data();
  b.row_offsets = x.row_offsets.data();
  b.row_bags = x.row_bags.data();
  auto on_cpu = EmbeddingMlp::Create(&cpu_, *layout, shape, batch);
  ASSERT_TRUE(on_cpu.ok());
  std::vector<float> grads_cpu(total), row_grads_cpu(rows.size());
  const double loss_cpu = (*on_cpu)->ForwardBackward(
      params.data(), b, grads_cpu.data(), row_grads_cpu.data(), nullptr);

  auto on_gpu = EmbeddingMlp::Create(gpu_.get(), *layout, shape, batch);
  ASSERT_TRUE(on_gpu.ok());
  b.dense = Up(dense);
  b.row_values = Up(rows);
  b.bag_offsets = UpIndices(x.bag_offsets);
  b.bag_rows = UpIndices(x.bag_rows);
  b.row_offsets = UpIndices(x.row_offsets);
  b.row_bags = UpIndices(x.row_bags);
  float* grads = Up(std::vector<float>(total, 0.0f));
  float* row_grads = Up(std::vector<float>(rows.size(), 0.0f));
  std::vector<int64_t> ready;
  const double loss_gpu = (*on_gpu)->ForwardBackward(
      Up(params), b, grads, row_grads,
      [&ready](int64_t from) { ready.push_back(from); });
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-5 * loss_cpu);
  EXPECT_LE(MaxRelError(Down(grads, total), grads_cpu), 1e-4);
  EXPECT_LE(MaxRelError(Down(row_grads, rows.size()), row_grads_cpu), 1e-4);
  ASSERT_FALSE(ready.empty());
  EXPECT_EQ(ready.back(), 0) << "every gradient reported ready";
}

INSTANTIATE_TEST_SUITE_P(ConcatAndDot, CudaEmbeddingMlpTest, ::testing::Bool());

}  // namespace
}  // namespace fulcrum
