#include "common/dataplane/parameter_channel.h"

#include <algorithm>

namespace fulcrum {

void SumGradients(absl::Span<const WeightedGradient> sources, int64_t begin,
                  int64_t n, float* out) {
  if (sources.empty()) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  // Block by block, so that `out` stays in L1 while each source is added
  // (one pass over each source and over out, whatever their number).
  constexpr int64_t kBlock = 2048;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    float* o = out + b;
    const float w0 = sources[0].weight;
    const float* g0 = sources[0].grads + begin + b;
    for (int64_t i = 0; i < m; ++i) o[i] = w0 * g0[i];
    for (size_t k = 1; k < sources.size(); ++k) {
      const float w = sources[k].weight;
      const float* g = sources[k].grads + begin + b;
      for (int64_t i = 0; i < m; ++i) o[i] += w * g[i];
    }
  }
}

}  // namespace fulcrum
