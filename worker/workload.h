// What a TrainingRun trains - a model and its data - behind one interface,
// so that the step loop (generations, chunk leases, pushes, parameters
// back, statistics, stops) is the same whatever the model:
//   ImageWorkload  model mlp on IDX images (image_workload.h);
//   CtrWorkload    model embedding_mlp on Criteo click logs, with embedding
//                  rows pulled and pushed every step (ctr_workload.h).
// A new built-in model plugs in here.
//
// Thread safety: none; the training thread owns it.
#ifndef FULCRUM_WORKER_WORKLOAD_H_
#define FULCRUM_WORKER_WORKLOAD_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dataplane/parameter_channel.h"
#include "worker/job_link.h"

namespace fulcrum {

// A test-set evaluation. `score` is what the job's target_accuracy is
// compared with and Progress.test_accuracy reports: the accuracy of a
// classifier, the AUC of a click model.
struct Evaluation {
  double score = 0;
  double loss = 0;  // mean over the test set
};

class Workload {
 public:
  // grads[ready_from, total) are final for this step.
  using GradientReady = std::function<void(int64_t ready_from)>;

  virtual ~Workload() = default;

  // Training samples (what the data source permutes and leases).
  virtual int64_t TrainSize() const = 0;

  // A generation was joined: `options` reach its shards (embedding rows
  // go there from now on).
  virtual absl::Status StartGeneration(const ChannelOptions& options) {
    return absl::OkStatus();
  }

  // The gradient of the mean loss over `samples` (indices into the
  // training set) into `grads` (backend memory, every element), calling
  // `ready` as parts of it complete; returns the mean loss. `params` is in
  // backend memory. Anything else the step owes the shards (embedding rows'
  // gradients) is pushed before it returns.
  virtual absl::StatusOr<double> ComputeGradient(
      int64_t step, absl::Span<const int64_t> samples, const float* params,
      float* grads, const GradientReady& ready) = 0;

  // The next step, begun while its parameters arrive (optional; host
  // backends): PrepareStep names step `step`'s samples before the wait for
  // its parameters; ParametersArrived(p, params) says that partition p of
  // `params` (backend memory) holds that step's values, and may compute
  // what depends on it alone. ComputeGradient of the same step and samples
  // then does only the rest; anything else drops what was prepared.
  virtual void PrepareStep(int64_t step, absl::Span<const int64_t> samples) {}
  virtual void ParametersArrived(const Partition& p, const float* params) {}

  // This worker has no samples at `step` (an empty share): the shards still
  // hear of the step where they count steps (embedding tables' clocks).
  virtual absl::Status EmptyStep(int64_t step) { return absl::OkStatus(); }

  // The test split's score and loss at `params` (backend memory); loads the
  // test split at the first call (rank 0 evaluates).
  virtual absl::StatusOr<Evaluation> Evaluate(const float* params) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKLOAD_H_
