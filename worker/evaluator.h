// Test-set evaluation of the mlp (ImageWorkload's): accuracy and mean loss
// of given parameters on the job's test split, in batches on the worker's
// backend. Rank 0 evaluates; whoever becomes rank 0 loads the test set then.
//
// Thread safety: none; the training thread owns it.
#ifndef FULCRUM_WORKER_EVALUATOR_H_
#define FULCRUM_WORKER_EVALUATOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor/layout.h"
#include "worker/backend/backend.h"
#include "worker/backend/device_buffer.h"
#include "worker/data/idx.h"
#include "worker/data/sampler.h"
#include "worker/model/mlp.h"
#include "worker/workload.h"

namespace fulcrum {

class Evaluator {
 public:
  // `backend`, `layout`, `gather` and `test` are not owned and must outlive
  // it. Fails (the backend's status) when its buffers cannot be allocated.
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(
      Backend* backend, const ParameterLayout* layout,
      const BatchGatherer* gather, const LabeledImages* test, int batch);

  // `params` in the backend's memory.
  Evaluation Evaluate(const float* params);

 private:
  Evaluator(Backend* backend, const ParameterLayout* layout,
            const BatchGatherer* gather, const LabeledImages* test, int batch);

  Backend* const backend_;               // Not owned.
  const BatchGatherer* const gather_;    // Not owned.
  const LabeledImages* const test_;      // Not owned.
  const int batch_;
  const int64_t pixels_;
  std::vector<float> x_;
  std::vector<int32_t> y_;
  DeviceBuffer x_dev_;
  Mlp mlp_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_EVALUATOR_H_
