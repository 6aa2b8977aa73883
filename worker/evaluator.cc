#include "worker/evaluator.h"

#include <algorithm>

namespace fulcrum {

Evaluator::Evaluator(Backend* backend, const ParameterLayout* layout,
                     const BatchGatherer* gather, const LabeledImages* test,
                     int batch)
    : backend_(backend),
      gather_(gather),
      test_(test),
      batch_(batch),
      pixels_(static_cast<int64_t>(test->images.rows) * test->images.cols),
      x_(static_cast<int64_t>(batch) * pixels_),
      y_(batch),
      x_dev_(backend, x_.data(), static_cast<int64_t>(batch) * pixels_),
      mlp_(backend, *layout, batch) {}

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(
    Backend* backend, const ParameterLayout* layout,
    const BatchGatherer* gather, const LabeledImages* test, int batch) {
  std::unique_ptr<Evaluator> e(
      new Evaluator(backend, layout, gather, test, batch));
  if (!backend->status().ok()) return backend->status();
  return e;
}

Evaluation Evaluator::Evaluate(const float* params) {
  int64_t correct = 0;
  double loss = 0;
  const int64_t n = test_->images.count;
  for (int64_t first = 0; first < n; first += batch_) {
    const int64_t count = std::min<int64_t>(batch_, n - first);
    gather_->GatherRange(test_->images, test_->labels, first, count, x_.data(),
                         y_.data());
    backend_->CopyToDevice(x_.data(), x_dev_.get(), count * pixels_);
    correct += mlp_.Evaluate(params, x_dev_.get(), y_.data(),
                             static_cast<int>(count), &loss);
  }
  return {n > 0 ? static_cast<double>(correct) / n : 0.0,
          n > 0 ? loss / n : 0.0};
}

}  // namespace fulcrum
