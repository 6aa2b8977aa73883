#include "worker/image_workload.h"

#include "common/status/status_macros.h"

namespace fulcrum {

ImageWorkload::ImageWorkload(Backend* backend, const ParameterLayout* layout,
                             const LabeledImages* train, TestLoader load_test,
                             int batch, int eval_batch)
    : backend_(backend),
      layout_(layout),
      train_(train),
      load_test_(std::move(load_test)),
      eval_batch_(eval_batch),
      pixels_(static_cast<int64_t>(train->images.rows) * train->images.cols),
      x_(batch * pixels_),
      y_(batch),
      x_dev_(backend, x_.data(), batch * pixels_),
      mlp_(backend, *layout, batch),
      gather_(train->images) {}

absl::StatusOr<std::unique_ptr<ImageWorkload>> ImageWorkload::Create(
    Backend* backend, const ParameterLayout* layout,
    const LabeledImages* train, TestLoader load_test, int batch,
    int eval_batch) {
  std::unique_ptr<ImageWorkload> w(new ImageWorkload(
      backend, layout, train, std::move(load_test), batch, eval_batch));
  RETURN_IF_ERROR(backend->status());  // every buffer was allocated
  return w;
}

void ImageWorkload::Gather(absl::Span<const int64_t> samples) {
  const int64_t count = static_cast<int64_t>(samples.size());
  gather_.Gather(train_->images, train_->labels, samples.data(), count,
                 x_.data(), y_.data());
  backend_->CopyToDevice(x_.data(), x_dev_.get(), count * pixels_);
}

absl::Status ImageWorkload::StartGeneration(const ChannelOptions& options) {
  prepared_step_ = -1;
  mlp_.Unprepare();
  return absl::OkStatus();
}

void ImageWorkload::PrepareStep(int64_t step,
                                absl::Span<const int64_t> samples) {
  prepared_step_ = -1;
  mlp_.Unprepare();
  if (samples.empty() || !backend_->HostAccessible()) return;
  Gather(samples);
  mlp_.Prepare(x_dev_.get(), static_cast<int>(samples.size()));
  prepared_step_ = step;
  prepared_samples_ = samples;
}

void ImageWorkload::ParametersArrived(const Partition& p,
                                      const float* params) {
  if (prepared_step_ >= 0) mlp_.Arrived(params, p.offset, p.size);
}

absl::StatusOr<double> ImageWorkload::ComputeGradient(
    int64_t step, absl::Span<const int64_t> samples, const float* params,
    float* grads, const GradientReady& ready) {
  // The same samples (the same positions of the same epoch order) as the
  // prepared step: gathered already, the first layer partly computed.
  const bool prepared = prepared_step_ == step &&
                        prepared_samples_.data() == samples.data() &&
                        prepared_samples_.size() == samples.size();
  prepared_step_ = -1;
  if (!prepared) {
    mlp_.Unprepare();
    Gather(samples);
  }
  return mlp_.ForwardBackward(params, x_dev_.get(), y_.data(),
                              static_cast<int>(samples.size()), grads, ready);
}

absl::StatusOr<Evaluation> ImageWorkload::Evaluate(const float* params) {
  if (evaluator_ == nullptr) {
    ASSIGN_OR_RETURN(const LabeledImages* test, load_test_());
    ASSIGN_OR_RETURN(evaluator_, Evaluator::Create(backend_, layout_, &gather_,
                                                   test, eval_batch_));
  }
  return evaluator_->Evaluate(params);
}

}  // namespace fulcrum
