#include "common/dataplane/gradient_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fulcrum {

GradientEncoder::GradientEncoder(const ParameterLayout* layout,
                                 int64_t chunk_elems, WireEncoding encoding,
                                 double topk)
    : layout_(layout),
      chunk_elems_(std::max<int64_t>(1, chunk_elems)),
      encoding_(encoding),
      topk_(topk) {
  const int64_t total = layout_->total_size();
  if (!sparse()) {
    if (encoding_ != WireEncoding::kFp32)
      encoded_.resize(static_cast<size_t>(total) * ElementBytes(encoding_));
    return;
  }
  for (const Partition& p : layout_->partitions()) {
    first_chunk_.push_back(static_cast<int64_t>(chunks_.size()));
    for (int64_t at = 0; at < p.size; at += chunk_elems_) {
      const int64_t k = Kept(std::min(chunk_elems_, p.size - at));
      chunks_.emplace_back();
      chunks_.back().indices.reserve(k);
      chunks_.back().values.resize(k * ElementBytes(encoding_));
    }
  }
  residual_.assign(total, 0.0f);
  before_.assign(total, 0.0f);
}

int64_t GradientEncoder::Kept(int64_t n) const {
  return std::clamp<int64_t>(std::llround(topk_ * n), 1, n);
}

GradientEncoder::Chunk GradientEncoder::Encode(int32_t partition,
                                               int64_t offset, int64_t n,
                                               const float* grads,
                                               int64_t step,
                                               int64_t generation) {
  const Partition& p = layout_->partitions()[partition];
  const int64_t begin = p.offset + offset;
  const float* g = grads + begin;
  if (sparse()) {
    Sparse& s = chunks_[first_chunk_[partition] + offset / chunk_elems_];
    return EncodeSparse(s, begin, n, g, step, generation);
  }
  if (encoding_ == WireEncoding::kFp32)
    return {reinterpret_cast<const char*>(g), static_cast<size_t>(n) * 4, {}};
  const int width = ElementBytes(encoding_);
  char* e = encoded_.data() + begin * width;
  EncodeRun(encoding_, g, n, e);
  return {e, static_cast<size_t>(n) * width, {}};
}

GradientEncoder::Chunk GradientEncoder::EncodeSparse(Sparse& s, int64_t begin,
                                                     int64_t n, const float* g,
                                                     int64_t step,
                                                     int64_t generation) {
  const int width = ElementBytes(encoding_);
  const auto done = [&]() -> Chunk {
    if (s.dense) return {s.whole.data(), s.whole.size(), {}};
    return {s.values.data(), s.indices.size() * width,
            absl::string_view(reinterpret_cast<const char*>(s.indices.data()),
                              s.indices.size() * sizeof(uint32_t))};
  };
  if (s.step == step && s.generation == generation) return done();  // again
  float* r = residual_.data() + begin;
  float* before = before_.data() + begin;
  if (s.step == step) {
    std::memcpy(r, before, sizeof(float) * n);  // redone: as before the step
  } else {
    std::memcpy(before, r, sizeof(float) * n);
  }
  s.step = step;
  s.generation = generation;
  // a = g + r, in place; |a| into a scratch for the selection.
  thread_local std::vector<float> magnitude;
  magnitude.resize(n);
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    r[i] += g[i];
    magnitude[i] = std::fabs(r[i]);
    finite &= magnitude[i] <= 3.4028235e38f;  // false for NaN and infinity
  }
  if (!finite) {  // sent whole: the shard refuses it and names the worker
    s.dense = true;
    s.whole.resize(static_cast<size_t>(n) * width);
    EncodeRun(encoding_, r, n, s.whole.data());
    std::fill(r, r + n, 0.0f);
    return done();
  }
  s.dense = false;
  const int64_t k = Kept(n);
  // The k-th largest magnitude; the k largest are those above it and, of
  // the ties at it, the first in order.
  std::nth_element(magnitude.begin(), magnitude.begin() + (n - k),
                   magnitude.end());
  const float threshold = magnitude[n - k];
  int64_t ties = k;  // k less those above (all placed after n - k)
  for (int64_t j = n - k + 1; j < n; ++j) ties -= magnitude[j] > threshold;
  s.indices.clear();
  s.indices.reserve(k);
  thread_local std::vector<float> picked, sent;
  picked.clear();
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(r[i]);
    if (a > threshold || (a == threshold && ties > 0)) {
      if (a == threshold) --ties;
      s.indices.push_back(static_cast<uint32_t>(i));
      picked.push_back(r[i]);
    }
  }
  EncodeRun(encoding_, picked.data(), static_cast<int64_t>(picked.size()),
            s.values.data());
  // What was sent leaves the residual; bf16's rounding error stays in it.
  sent.resize(picked.size());
  DecodeRun(encoding_, s.values.data(), static_cast<int64_t>(picked.size()),
            sent.data());
  for (size_t j = 0; j < picked.size(); ++j) r[s.indices[j]] -= sent[j];
  return done();
}

}  // namespace fulcrum
