#include "server/ps/embedding/row_math.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(RowMathTest, InitialRowsArePureAndDistributedAsAsked) {
  v1::EmbeddingTableSpec spec;
  spec.set_name("user");
  spec.mutable_init()->set_type("uniform");
  spec.mutable_init()->set_scale(0.5);
  RowInit u = RowInitFromSpec(spec, 42);
  std::vector<float> a(8), b(8), c(8);
  InitialRow(u, 17, 8, a.data());
  InitialRow(u, 17, 8, b.data());
  InitialRow(u, 18, 8, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  spec.set_name("item");  // another table: other values for the same id
  InitialRow(RowInitFromSpec(spec, 42), 17, 8, c.data());
  EXPECT_NE(a, c);
  InitialRow(RowInitFromSpec(spec, 43), 17, 8, b.data());  // another seed
  EXPECT_NE(b, c);

  double sum = 0, sq = 0, lo = 1, hi = -1;
  const int n = 20000, dim = 5;  // odd dim: Box-Muller's last value alone
  std::vector<float> row(dim);
  for (int id = 0; id < n; ++id) {
    InitialRow(u, id, dim, row.data());
    for (float v : row) {
      lo = std::min<double>(lo, v);
      hi = std::max<double>(hi, v);
      sum += v;
    }
  }
  EXPECT_GE(lo, -0.5);
  EXPECT_LE(hi, 0.5);
  EXPECT_LT(lo, -0.49);
  EXPECT_GT(hi, 0.49);
  EXPECT_NEAR(sum / (n * dim), 0.0, 0.01);

  spec.mutable_init()->set_type("normal");
  spec.mutable_init()->set_scale(2.0);
  RowInit g = RowInitFromSpec(spec, 1);
  sum = 0;
  for (int id = 0; id < n; ++id) {
    InitialRow(g, id, dim, row.data());
    for (float v : row) {
      sum += v;
      sq += double{v} * v;
    }
  }
  EXPECT_NEAR(sum / (n * dim), 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(sq / (n * dim)), 2.0, 0.05);

  spec.mutable_init()->set_type("zeros");
  spec.mutable_init()->clear_scale();
  InitialRow(RowInitFromSpec(spec, 1), 5, dim, row.data());
  EXPECT_EQ(row, std::vector<float>(dim, 0.0f));
}

// Each optimizer against a double-precision transcription of its formula
// (torch.optim.Adagrad / Adam with the row's own step count).
TEST(RowMathTest, OptimizersFollowTheirFormulas) {
  const int dim = 3;
  const std::vector<std::vector<float>> grads = {
      {0.5f, -1.0f, 2.0f}, {0.1f, 0.0f, -3.0f}, {-0.7f, 0.2f, 0.05f}};
  for (const char* type : {"sgd", "adagrad", "adam"}) {
    v1::EmbeddingOptimizerSpec spec;
    spec.set_type(type);
    spec.set_lr(0.1);
    if (std::string(type) == "adagrad") {
      spec.set_eps(1e-10);
      spec.set_initial_accumulator(0.1);
    }
    if (std::string(type) == "adam") {
      spec.set_eps(1e-8);
      spec.set_beta1(0.9);
      spec.set_beta2(0.999);
    }
    RowOptimizer o = RowOptimizerFromSpec(spec);
    std::vector<float> w = {1.0f, 2.0f, -1.0f};
    std::vector<float> state(o.StateFloats(dim), -7.0f);
    o.InitState(state.data(), dim);
    std::vector<double> rw(w.begin(), w.end()), a(dim, 0.1), m(dim, 0), v(dim, 0);
    for (size_t t = 1; t <= grads.size(); ++t) {
      o.Apply(w.data(), state.data(), grads[t - 1].data(), dim);
      for (int j = 0; j < dim; ++j) {
        const double gj = grads[t - 1][j];
        if (std::string(type) == "sgd") {
          rw[j] -= 0.1 * gj;
        } else if (std::string(type) == "adagrad") {
          a[j] += gj * gj;
          rw[j] -= 0.1 * gj / (std::sqrt(a[j]) + 1e-10);
        } else {
          m[j] = 0.9 * m[j] + 0.1 * gj;
          v[j] = 0.999 * v[j] + 0.001 * gj * gj;
          const double mh = m[j] / (1 - std::pow(0.9, t));
          const double vh = v[j] / (1 - std::pow(0.999, t));
          rw[j] -= 0.1 * mh / (std::sqrt(vh) + 1e-8);
        }
      }
      for (int j = 0; j < dim; ++j) {
        EXPECT_NEAR(w[j], rw[j], 1e-5) << type << " step " << t << " j " << j;
      }
    }
  }
  RowOptimizer sgd;
  sgd.type = RowOptimizer::Type::kSgd;
  EXPECT_EQ(sgd.StateFloats(16), 0);
}

}  // namespace
}  // namespace fulcrum
