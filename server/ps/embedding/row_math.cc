#include "server/ps/embedding/row_math.h"

#include <cmath>
#include <cstring>

#include "common/embedding/placement.h"
#include "common/hash/hash.h"

namespace fulcrum {
namespace {

// Uniform in (0, 1), from 24 random bits.
float Unit(uint64_t bits) {
  return (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

uint64_t StringHash(const std::string& s) { return Mix64(Fnv1a64(s)); }

}  // namespace

int RowOptimizer::StateFloats(int dim) const {
  switch (type) {
    case Type::kSgd:
      return 0;
    case Type::kAdagrad:
      return dim;
    case Type::kAdam:
      return 2 * dim + 1;
  }
  return 0;
}

void RowOptimizer::InitState(float* state, int dim) const {
  switch (type) {
    case Type::kSgd:
      return;
    case Type::kAdagrad:
      for (int j = 0; j < dim; ++j) state[j] = initial_accumulator;
      return;
    case Type::kAdam:
      std::memset(state, 0, sizeof(float) * (2 * dim + 1));
      return;
  }
}

void RowOptimizer::Apply(float* w, float* state, const float* g,
                         int dim) const {
  switch (type) {
    case Type::kSgd:
      for (int j = 0; j < dim; ++j) w[j] -= lr * g[j];
      return;
    case Type::kAdagrad:
      for (int j = 0; j < dim; ++j) {
        state[j] += g[j] * g[j];
        w[j] -= lr * g[j] / (std::sqrt(state[j]) + eps);
      }
      return;
    case Type::kAdam: {
      float* m = state;
      float* v = state + dim;
      uint32_t t;
      std::memcpy(&t, state + 2 * dim, sizeof(t));
      ++t;
      std::memcpy(state + 2 * dim, &t, sizeof(t));
      const double c1 = 1.0 - std::pow(static_cast<double>(beta1), t);
      const double c2 = 1.0 - std::pow(static_cast<double>(beta2), t);
      const float step = static_cast<float>(lr / c1);
      const float root_c2 = static_cast<float>(std::sqrt(c2));
      for (int j = 0; j < dim; ++j) {
        m[j] = beta1 * m[j] + (1 - beta1) * g[j];
        v[j] = beta2 * v[j] + (1 - beta2) * g[j] * g[j];
        w[j] -= step * m[j] / (std::sqrt(v[j]) / root_c2 + eps);
      }
      return;
    }
  }
}

RowInit RowInitFromSpec(const v1::EmbeddingTableSpec& table, uint64_t seed) {
  RowInit init;
  const std::string& type = table.init().type();
  init.type = type == "zeros"    ? RowInit::Type::kZeros
              : type == "normal" ? RowInit::Type::kNormal
                                 : RowInit::Type::kUniform;
  init.scale = static_cast<float>(table.init().scale());
  init.salt = Mix64(seed) ^ StringHash(table.name());
  return init;
}

RowOptimizer RowOptimizerFromSpec(const v1::EmbeddingOptimizerSpec& spec) {
  RowOptimizer o;
  o.type = spec.type() == "sgd"    ? RowOptimizer::Type::kSgd
           : spec.type() == "adam" ? RowOptimizer::Type::kAdam
                                   : RowOptimizer::Type::kAdagrad;
  o.lr = static_cast<float>(spec.lr());
  if (spec.has_eps()) o.eps = static_cast<float>(spec.eps());
  if (spec.has_beta1()) o.beta1 = static_cast<float>(spec.beta1());
  if (spec.has_beta2()) o.beta2 = static_cast<float>(spec.beta2());
  o.initial_accumulator = static_cast<float>(spec.initial_accumulator());
  return o;
}

void InitialRow(const RowInit& init, uint64_t id, int dim, float* out) {
  if (init.type == RowInit::Type::kZeros) {
    std::memset(out, 0, sizeof(float) * dim);
    return;
  }
  const uint64_t base = Mix64(id ^ init.salt);
  if (init.type == RowInit::Type::kUniform) {
    for (int j = 0; j < dim; ++j) {
      const float u = Unit(Mix64(base + 0x9e3779b97f4a7c15ULL * (j + 1)));
      out[j] = init.scale * (2.0f * u - 1.0f);
    }
    return;
  }
  for (int j = 0; j < dim; j += 2) {  // Box-Muller, two values per pair
    const float u1 = Unit(Mix64(base + 0x9e3779b97f4a7c15ULL * (j + 1)));
    const float u2 = Unit(Mix64(base + 0x9e3779b97f4a7c15ULL * (j + 2)));
    const float r = std::sqrt(-2.0f * std::log(u1));
    const float a = 6.28318530718f * u2;
    out[j] = init.scale * r * std::cos(a);
    if (j + 1 < dim) out[j + 1] = init.scale * r * std::sin(a);
  }
}

}  // namespace fulcrum
