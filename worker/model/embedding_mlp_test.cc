#include "worker/model/embedding_mlp.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/bag_index.h"
#include "worker/testing/simulated_device_backend.h"

namespace fulcrum {
namespace {

TEST(BagIndexTest, DistinctRowsAndBothMaps) {
  // Bags: {7, 9} {9} {} {7, 7, 5}
  const std::vector<uint64_t> ids = {7, 9, 9, 7, 7, 5};
  const std::vector<int32_t> offsets = {0, 2, 3, 3, 6};
  BagIndexer indexer;
  BagIndex x;
  ASSERT_TRUE(indexer.Build(ids, offsets, &x).ok());
  EXPECT_EQ(x.ids, (std::vector<uint64_t>{7, 9, 5}));
  EXPECT_EQ(x.counts, (std::vector<uint32_t>{3, 2, 1}));
  EXPECT_EQ(x.bags(), 4);
  EXPECT_EQ(x.bag_rows, (std::vector<int32_t>{0, 1, 1, 0, 0, 2}));
  EXPECT_EQ(x.row_offsets, (std::vector<int32_t>{0, 3, 5, 6}));
  // Row 7 is in bag 0 once and bag 3 twice; row 9 in bags 0 and 1.
  EXPECT_EQ(x.row_bags, (std::vector<int32_t>{0, 3, 3, 0, 1, 3}));
  // Reused for a second batch: nothing of the first remains.
  ASSERT_TRUE(indexer.Build(std::vector<uint64_t>{5}, std::vector<int32_t>{0, 1}, &x).ok());
  EXPECT_EQ(x.ids, (std::vector<uint64_t>{5}));
  EXPECT_EQ(x.row_bags, (std::vector<int32_t>{0}));
}

TEST(BagIndexTest, BadOffsetsAreNamed) {
  BagIndexer indexer;
  BagIndex x;
  const std::vector<uint64_t> ids = {1, 2};
  for (const std::vector<int32_t>& offsets :
       std::vector<std::vector<int32_t>>{{}, {1, 2}, {0, 1}, {0, 2, 1, 2}}) {
    absl::Status s = indexer.Build(ids, offsets, &x);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("offsets"), absl::string_view::npos) << s;
  }
}

TEST(EmbeddingMlpTensorsTest, NamesShapesAndErrors) {
  EmbeddingMlpShape s{.fields = 3, .dense = 2, .dim = 4, .bottom = {5},
                      .top = {6}};
  auto t = EmbeddingMlpTensors(s);
  ASSERT_TRUE(t.ok());
  std::vector<std::string> names;
  for (const TensorInfo& i : *t) names.push_back(i.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "bottom.0.weight", "bottom.0.bias",
                       "top.0.embedding_weight", "top.0.dense_weight",
                       "top.0.bias", "top.1.weight", "top.1.bias"}));
  EXPECT_EQ((*t)[2].shape, (std::vector<int64_t>{6, 12}));
  EXPECT_EQ((*t)[3].shape, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ((*t)[2].fan_in, 17);
  EXPECT_EQ((*t)[5].shape, (std::vector<int64_t>{1, 6}));
  // The dot interaction: the pairs among 3 bags and the bottom's output.
  EmbeddingMlpShape dot = s;
  dot.dot = true;
  dot.bottom = {4};
  auto with_dots = EmbeddingMlpTensors(dot);
  ASSERT_TRUE(with_dots.ok()) << with_dots.status();
  EXPECT_EQ((*with_dots)[4].name, "top.0.interaction_weight");
  EXPECT_EQ((*with_dots)[4].shape, (std::vector<int64_t>{6, 6}));  // 4 choose 2
  EXPECT_EQ((*with_dots)[2].fan_in, 12 + 4 + 6);
  dot.bottom = {5};
  EXPECT_NE(EmbeddingMlpTensors(dot).status().message().find("bottom must end"),
            absl::string_view::npos);
  s.top = {6, 0};
  EXPECT_NE(EmbeddingMlpTensors(s).status().message().find("top[1]"),
            absl::string_view::npos);
  s.top = {};
  s.dim = 0;
  EXPECT_NE(EmbeddingMlpTensors(s).status().message().find("dim"),
            absl::string_view::npos);
}

// A small model and batch on the host: 3 samples, 2 fields, rows shared
// between samples and within one (ids 10 and 11 repeat).
struct Fixture {
  EmbeddingMlpShape shape;
  static constexpr int kBatch = 3;
  ParameterLayout layout;
  std::vector<float> params, dense, labels = {1, 0, 1}, rows;
  BagIndex index;

  // concat: bottom 3 -> 5; dot: bottom 3 -> 4 (the table's dim).
  explicit Fixture(bool dot = false)
      : shape{.fields = 2, .dense = 3, .dim = 4,
              .bottom = {dot ? 4 : 5}, .top = {6, 3}, .dot = dot},
        layout(*ParameterLayout::ForTensors(*EmbeddingMlpTensors(shape), 1,
                                            1 << 20)) {
    params.resize(layout.total_size());
    InitializeParameters(layout, 7, 0, layout.total_size(), params.data());
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    for (int i = 0; i < kBatch * shape.dense; ++i) dense.push_back(normal(rng));
    // Bags (sample, field): {10} {11} | {11} {12, 10} | {10} {10}
    const std::vector<uint64_t> ids = {10, 11, 11, 12, 10, 10, 10};
    const std::vector<int32_t> offsets = {0, 1, 2, 3, 5, 6, 7};
    BagIndexer indexer;
    EXPECT_TRUE(indexer.Build(ids, offsets, &index).ok());
    for (int i = 0; i < index.rows() * shape.dim; ++i)
      rows.push_back(0.5f * normal(rng));
  }
  // Pointers into host vectors (a CPU backend computes on them directly).
  EmbeddingMlp::Batch Batch(const std::vector<float>& row_values) const {
    EmbeddingMlp::Batch b;
    b.size = kBatch;
    b.dense = dense.data();
    b.labels = labels.data();
    b.rows = index.rows();
    b.row_values = row_values.data();
    b.bag_offsets = index.bag_offsets.data();
    b.bag_rows = index.bag_rows.data();
    b.row_offsets = index.row_offsets.data();
    b.row_bags = index.row_bags.data();
    return b;
  }
};

double MeanLoss(EmbeddingMlp& m, const Fixture& f,
                const std::vector<float>& params,
                const std::vector<float>& rows) {
  std::vector<float> logits(Fixture::kBatch);
  m.Predict(params.data(), f.Batch(rows), logits.data());
  double sum = 0;
  for (int i = 0; i < Fixture::kBatch; ++i) {
    const double z = logits[i], y = f.labels[i];
    sum += std::log1p(std::exp(z)) - y * z;
  }
  return sum / Fixture::kBatch;
}

class EmbeddingMlpGradTest : public ::testing::TestWithParam<bool> {};

TEST_P(EmbeddingMlpGradTest, GradientsOfParametersAndRowsMatchFiniteDifferences) {
  Fixture f(/*dot=*/GetParam());
  CpuBackend backend;
  auto m = EmbeddingMlp::Create(&backend, f.layout, f.shape, Fixture::kBatch);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<float> grads(f.layout.total_size());
  std::vector<float> row_grads(f.rows.size(), 99.0f);
  std::vector<int64_t> ready;
  const double loss = (*m)->ForwardBackward(
      f.params.data(), f.Batch(f.rows), grads.data(), row_grads.data(),
      [&](int64_t r) { ready.push_back(r); });
  EXPECT_NEAR(loss, MeanLoss(**m, f, f.params, f.rows), 1e-6);
  // Ready from the last layer down to the first: top.2, top.1, top.0, bottom.0.
  const auto& t = f.layout.tensors();
  const size_t top1 = GetParam() ? 6 : 5;  // dot: top.0 has 4 tensors
  EXPECT_EQ(ready, (std::vector<int64_t>{t[top1 + 2].offset, t[top1].offset,
                                         t[2].offset, 0}));
  const float eps = 1e-3f;
  for (int64_t i = 0; i < f.layout.total_size(); ++i) {
    std::vector<float> p = f.params;
    p[i] += eps;
    const double up = MeanLoss(**m, f, p, f.rows);
    p[i] = f.params[i] - eps;
    const double numeric = (up - MeanLoss(**m, f, p, f.rows)) / (2 * eps);
    EXPECT_NEAR(grads[i], numeric, 1e-3 + 2e-2 * std::abs(numeric))
        << f.layout.tensors().size() << " parameter " << i;
  }
  for (size_t i = 0; i < f.rows.size(); ++i) {
    std::vector<float> r = f.rows;
    r[i] += eps;
    const double up = MeanLoss(**m, f, f.params, r);
    r[i] = f.rows[i] - eps;
    const double numeric = (up - MeanLoss(**m, f, f.params, r)) / (2 * eps);
    EXPECT_NEAR(row_grads[i], numeric, 1e-3 + 2e-2 * std::abs(numeric))
        << "row element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(ConcatAndDot, EmbeddingMlpGradTest,
                         ::testing::Bool());

TEST(EmbeddingMlpTest, RefusesALayoutOfAnotherShape) {
  Fixture f;
  CpuBackend backend;
  EmbeddingMlpShape other = f.shape;
  other.dim = 5;
  auto m = EmbeddingMlp::Create(&backend, f.layout, other, 4);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("top.0.embedding_weight"),
            absl::string_view::npos)
      << m.status();
  auto mlp_layout = ParameterLayout::ForMlp({3, 4, 1}, 1, 1 << 20);
  EXPECT_FALSE(EmbeddingMlp::Create(&backend, *mlp_layout, f.shape, 4).ok());
}

// The device path (separate memory, index memory, copies) computes what
// the CPU computes, bit for bit, and touches no memory it should not.
TEST(EmbeddingMlpTest, SimulatedDeviceMatchesTheCpuBitForBit) {
  Fixture f;
  CpuBackend cpu;
  auto on_cpu = EmbeddingMlp::Create(&cpu, f.layout, f.shape, 8);
  ASSERT_TRUE(on_cpu.ok());
  std::vector<float> grads(f.layout.total_size()), row_grads(f.rows.size());
  const double loss = (*on_cpu)->ForwardBackward(
      f.params.data(), f.Batch(f.rows), grads.data(), row_grads.data(), nullptr);

  SimulatedDeviceBackend dev;
  auto on_dev = EmbeddingMlp::Create(&dev, f.layout, f.shape, 8);
  ASSERT_TRUE(on_dev.ok());
  const auto floats = [&](const std::vector<float>& host) {
    float* p = dev.Allocate(host.size());
    dev.CopyToDevice(host.data(), p, host.size());
    return p;
  };
  const auto ints = [&](const std::vector<int32_t>& host) {
    int32_t* p = dev.AllocateIndices(host.size());
    dev.CopyIndicesToDevice(host.data(), p, host.size());
    return p;
  };
  EmbeddingMlp::Batch b = f.Batch(f.rows);
  float* params = floats(f.params);
  b.dense = floats(f.dense);
  b.row_values = floats(f.rows);
  b.bag_offsets = ints(f.index.bag_offsets);
  b.bag_rows = ints(f.index.bag_rows);
  b.row_offsets = ints(f.index.row_offsets);
  b.row_bags = ints(f.index.row_bags);
  float* grads_dev = dev.Allocate(grads.size());
  float* row_grads_dev = dev.Allocate(row_grads.size());
  const double dev_loss = (*on_dev)->ForwardBackward(params, b, grads_dev,
                                                     row_grads_dev, nullptr);
  std::vector<float> g(grads.size()), rg(row_grads.size());
  dev.CopyToHost(grads_dev, g.data(), g.size());
  dev.CopyToHost(row_grads_dev, rg.data(), rg.size());
  ASSERT_TRUE(dev.status().ok()) << dev.status();
  EXPECT_EQ(dev_loss, loss);
  EXPECT_EQ(g, grads);
  EXPECT_EQ(rg, row_grads);
}

// Trained with plain SGD on the rows and the parameters, the model learns a
// click rule that lives only in the ids: label = 1 iff field 0's id is odd.
TEST(EmbeddingMlpTest, LearnsARuleCarriedByTheIds) {
  CpuBackend backend;
  EmbeddingMlpShape shape{.fields = 2, .dense = 1, .dim = 4, .bottom = {},
                          .top = {8}};
  auto layout = *ParameterLayout::ForTensors(*EmbeddingMlpTensors(shape), 1,
                                             1 << 20);
  const int batch = 32;
  auto m = EmbeddingMlp::Create(&backend, layout, shape, batch);
  ASSERT_TRUE(m.ok());
  std::vector<float> params(layout.total_size()), grads(params.size());
  InitializeParameters(layout, 3, 0, params.size(), params.data());
  std::vector<float> table(2 * 20 * shape.dim);  // ids 0..39
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (float& v : table) v = 0.1f * normal(rng);
  std::uniform_int_distribution<int> id(0, 19);
  BagIndexer indexer;
  BagIndex index;
  std::vector<uint64_t> ids(batch * 2);
  std::vector<int32_t> offsets(batch * 2 + 1);
  std::vector<float> dense(batch, 1.0f), labels(batch), rows, row_grads;
  const auto make = [&] {
    for (int i = 0; i < batch; ++i) {
      ids[2 * i] = id(rng);
      ids[2 * i + 1] = 20 + id(rng);  // noise field
      labels[i] = ids[2 * i] % 2;
    }
    for (int j = 0; j <= batch * 2; ++j) offsets[j] = j;
    ASSERT_TRUE(indexer.Build(ids, offsets, &index).ok());
    rows.resize(index.rows() * shape.dim);
    for (int r = 0; r < index.rows(); ++r) {
      std::copy_n(&table[index.ids[r] * shape.dim], shape.dim,
                  &rows[r * shape.dim]);
    }
  };
  const auto batch_of = [&] {
    EmbeddingMlp::Batch b;
    b.size = batch;
    b.dense = dense.data();
    b.labels = labels.data();
    b.rows = index.rows();
    b.row_values = rows.data();
    b.bag_offsets = index.bag_offsets.data();
    b.bag_rows = index.bag_rows.data();
    b.row_offsets = index.row_offsets.data();
    b.row_bags = index.row_bags.data();
    return b;
  };
  double first = 0, last = 0;
  for (int step = 0; step < 400; ++step) {
    make();
    row_grads.resize(rows.size());
    const double loss = (*m)->ForwardBackward(params.data(), batch_of(),
                                              grads.data(), row_grads.data(),
                                              nullptr);
    if (step == 0) first = loss;
    last = loss;
    for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.5f * grads[i];
    for (int r = 0; r < index.rows(); ++r) {
      for (int d = 0; d < shape.dim; ++d)
        table[index.ids[r] * shape.dim + d] -= 0.5f * row_grads[r * shape.dim + d];
    }
  }
  EXPECT_LT(last, 0.1 * first) << "first " << first << " last " << last;
  make();
  std::vector<float> logits(batch);
  (*m)->Predict(params.data(), batch_of(), logits.data());
  for (int i = 0; i < batch; ++i)
    EXPECT_EQ(logits[i] > 0, labels[i] == 1) << "sample " << i;
}

}  // namespace
}  // namespace fulcrum
