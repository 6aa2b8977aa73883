#include "worker/model/binary_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace fulcrum {

double Auc(absl::Span<const float> scores, absl::Span<const float> labels) {
  const size_t n = scores.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  double positives = 0, rank_sum = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && scores[order[j + 1]] == scores[order[i]]) ++j;
    const double rank = (i + j + 2) / 2.0;  // 1-based, ties averaged
    for (size_t k = i; k <= j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positives += 1;
        rank_sum += rank;
      }
    }
    i = j + 1;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

double LogLoss(absl::Span<const float> logits, absl::Span<const float> labels) {
  if (logits.empty()) return 0;
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double z = logits[i];
    sum += std::max(z, 0.0) - labels[i] * z + std::log1p(std::exp(-std::fabs(z)));
  }
  return sum / logits.size();
}

}  // namespace fulcrum
