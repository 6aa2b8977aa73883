// What happens to one embedding row's numbers: its initial values (a pure
// function of the job's seed, the table and the id, so a row reads the
// same before it exists, when it is created and on every shard) and its
// optimizer step, applied lazily - a row's state exists and moves only when
// the row is pushed.
//
//   sgd:     w -= lr g
//   adagrad: a += g^2; w -= lr g / (sqrt(a) + eps)       (a starts at
//            initial_accumulator; as torch.optim.Adagrad)
//   adam:    per-row step t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//            w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//            (lazy Adam: bias correction by the row's own step count)
//
// Thread safety: pure functions over the caller's memory.
#ifndef FULCRUM_SERVER_PS_EMBEDDING_ROW_MATH_H_
#define FULCRUM_SERVER_PS_EMBEDDING_ROW_MATH_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "fulcrum/v1/job.pb.h"

namespace fulcrum {

struct RowInit {
  enum class Type { kZeros, kUniform, kNormal };
  Type type = Type::kUniform;
  float scale = 0.01f;
  uint64_t salt = 0;  // the job's seed and the table's name, mixed
};

struct RowOptimizer {
  enum class Type { kSgd, kAdagrad, kAdam };
  Type type = Type::kAdagrad;
  float lr = 0.01f;
  float eps = 1e-10f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float initial_accumulator = 0.0f;

  // Floats of optimizer state per row: sgd 0, adagrad dim, adam 2 dim + 1
  // (the row's step count, stored as a uint32).
  int StateFloats(int dim) const;
  // Fresh state for a new row.
  void InitState(float* state, int dim) const;
  // One step of row `w` with gradient `g`.
  void Apply(float* w, float* state, const float* g, int dim) const;
};

// The table spec's init and optimizer (validated) as the math needs them.
RowInit RowInitFromSpec(const v1::EmbeddingTableSpec& table, uint64_t seed);
RowOptimizer RowOptimizerFromSpec(const v1::EmbeddingOptimizerSpec& spec);

// Writes row `id`'s initial values (dim floats) to `out`.
void InitialRow(const RowInit& init, uint64_t id, int dim, float* out);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_ROW_MATH_H_
