// The mlp model on IDX images (Fashion-MNIST): a batch is gathered from
// the training images (normalised, BatchGatherer), copied to the backend
// and run forward and backward (Mlp); evaluation is the test split's
// accuracy (Evaluator).
//
// Thread safety: none; the training thread owns it.
#ifndef FULCRUM_WORKER_IMAGE_WORKLOAD_H_
#define FULCRUM_WORKER_IMAGE_WORKLOAD_H_

#include <functional>
#include <memory>
#include <vector>

#include "worker/backend/device_buffer.h"
#include "worker/data/idx.h"
#include "worker/data/sampler.h"
#include "worker/evaluator.h"
#include "worker/model/mlp.h"
#include "worker/workload.h"

namespace fulcrum {

class ImageWorkload : public Workload {
 public:
  using TestLoader = std::function<absl::StatusOr<const LabeledImages*>()>;

  // `backend`, `layout` and `train` are not owned and must outlive it.
  // Fails with the backend's status when its buffers cannot be had.
  static absl::StatusOr<std::unique_ptr<ImageWorkload>> Create(
      Backend* backend, const ParameterLayout* layout,
      const LabeledImages* train, TestLoader load_test, int batch,
      int eval_batch);

  int64_t TrainSize() const override { return train_->images.count; }
  // Drops a prepared step: the new generation's values replace the ones it
  // was computed with.
  absl::Status StartGeneration(const ChannelOptions& options) override;
  absl::StatusOr<double> ComputeGradient(int64_t step,
                                         absl::Span<const int64_t> samples,
                                         const float* params, float* grads,
                                         const GradientReady& ready) override;
  absl::StatusOr<Evaluation> Evaluate(const float* params) override;
  // Gathers the next batch and computes the first layer's blocks as their
  // weights arrive (Mlp::Prepare / Arrived).
  void PrepareStep(int64_t step, absl::Span<const int64_t> samples) override;
  void ParametersArrived(const Partition& p, const float* params) override;

 private:
  // Gathers `samples` into x_dev_ (and their labels into y_).
  void Gather(absl::Span<const int64_t> samples);

  ImageWorkload(Backend* backend, const ParameterLayout* layout,
                const LabeledImages* train, TestLoader load_test, int batch,
                int eval_batch);

  Backend* const backend_;               // Not owned.
  const ParameterLayout* const layout_;  // Not owned.
  const LabeledImages* const train_;     // Not owned.
  const TestLoader load_test_;
  const int eval_batch_;
  const int64_t pixels_;
  std::vector<float> x_;
  std::vector<int32_t> y_;
  DeviceBuffer x_dev_;
  Mlp mlp_;
  BatchGatherer gather_;
  std::unique_ptr<Evaluator> evaluator_;  // at the first Evaluate
  // The prepared step (-1: none) and its samples (the span's data and size).
  int64_t prepared_step_ = -1;
  absl::Span<const int64_t> prepared_samples_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_IMAGE_WORKLOAD_H_
