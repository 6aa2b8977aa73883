// Scores of a binary classifier on a test set (the click model's
// evaluation): the area under the ROC curve and the mean log-loss.
#ifndef FULCRUM_WORKER_MODEL_BINARY_METRICS_H_
#define FULCRUM_WORKER_MODEL_BINARY_METRICS_H_

#include "absl/types/span.h"

namespace fulcrum {

// The probability that a random positive scores above a random negative
// (ties count one half), from the rank sum in O(n log n). 0.5 when either
// class is absent. REQUIRES: scores.size() == labels.size(), labels 0 or 1.
double Auc(absl::Span<const float> scores, absl::Span<const float> labels);

// Mean of log(1 + e^z) - y z over logits z (computed stably).
double LogLoss(absl::Span<const float> logits, absl::Span<const float> labels);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_MODEL_BINARY_METRICS_H_
