#include "common/dataplane/gradient_encoder.h"

#include <algorithm>
#include <cmath>

#include "common/dataplane/randomk.h"
#include "common/dataplane/topk.h"
#include "common/tensor/finite.h"

namespace fulcrum {

GradientEncoder::GradientEncoder(const ParameterLayout* layout,
                                 const Options& o)
    : layout_(layout),
      chunk_elems_(std::max<int64_t>(1, o.chunk_elems)),
      encoding_(o.encoding),
      fraction_(o.fraction),
      warmup_steps_(std::max<int64_t>(0, o.warmup_steps)),
      momentum_(o.fraction > 0 ? o.momentum : 0.0f),
      selection_(o.selection),
      seed_(o.seed),
      whole_below_(std::max<int64_t>(0, o.whole_below)) {
  const int64_t total = layout_->total_size();
  if (!sparse()) return;  // encoded_: at its first use
  for (const Partition& p : layout_->partitions()) {
    first_chunk_.push_back(static_cast<int64_t>(chunks_.size()));
    for (int64_t at = 0; at < p.size; at += chunk_elems_) {
      // The most a step keeps (all of it, while warming up).
      const int64_t n = std::min(chunk_elems_, p.size - at);
      const bool whole = n < whole_below_;
      const int64_t k = warmup_steps_ > 0 || whole ? n : Kept(n, 0);
      chunks_.emplace_back();
      chunks_.back().all_positions = whole;
      chunks_.back().indices.reserve(k);
      if (whole) {  // every position, every step: set once
        for (int64_t i = 0; i < n; ++i)
          chunks_.back().indices.push_back(static_cast<uint32_t>(i));
      }
      chunks_.back().values.resize(k * ElementBytes(encoding_));
    }
  }
  for (int b = 0; b < 2; ++b) {
    residual_[b].assign(total, 0.0f);
    if (momentum_ > 0) velocity_[b].assign(total, 0.0f);
  }
}

int64_t GradientEncoder::Kept(int64_t n, int64_t step) const {
  double fraction = fraction_;
  if (step < warmup_steps_) {
    fraction = std::pow(fraction_, static_cast<double>(step) / warmup_steps_);
  }
  return std::clamp<int64_t>(std::llround(fraction * n), 1, n);
}

std::vector<float> GradientEncoder::residual() const {
  std::vector<float> out;
  if (!sparse()) return out;
  out.resize(residual_[0].size());
  for (size_t p = 0; p < layout_->partitions().size(); ++p) {
    const Partition& part = layout_->partitions()[p];
    for (int64_t at = 0; at < part.size; at += chunk_elems_) {
      const Sparse& s = chunks_[first_chunk_[p] + at / chunk_elems_];
      const int64_t n = std::min(chunk_elems_, part.size - at);
      std::copy_n(residual_[s.cur].data() + part.offset + at, n,
                  out.data() + part.offset + at);
    }
  }
  return out;
}

GradientEncoder::Chunk GradientEncoder::Encode(int32_t partition,
                                               int64_t offset, int64_t n,
                                               const float* grads,
                                               int64_t step,
                                               int64_t generation,
                                               char* room) {
  const Partition& p = layout_->partitions()[partition];
  const int64_t begin = p.offset + offset;
  const float* g = grads + begin;
  if (sparse()) {
    const int64_t chunk = first_chunk_[partition] + offset / chunk_elems_;
    return EncodeSparse(chunks_[chunk], chunk, begin, n, g, step, generation);
  }
  if (encoding_ == WireEncoding::kFp32)
    return {reinterpret_cast<const char*>(g), static_cast<size_t>(n) * 4, {}};
  const int width = ElementBytes(encoding_);
  char* e = room;
  if (e == nullptr) {
    absl::call_once(encoded_once_, [this, width] {
      encoded_.reset(
          new char[static_cast<size_t>(layout_->total_size()) * width]);
    });
    e = encoded_.get() + begin * width;
  }
  EncodeRun(encoding_, g, n, e);
  return {e, static_cast<size_t>(n) * width, {}};
}

GradientEncoder::Chunk GradientEncoder::EncodeSparse(Sparse& s, int64_t chunk,
                                                     int64_t begin, int64_t n,
                                                     const float* g,
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
  // This step reads the state before it and writes the other buffer: a
  // new step the newest state, a redone one (same step, newer generation)
  // the state the first attempt started from.
  const bool redo = s.step == step;
  const int from = redo ? 1 - s.cur : s.cur;
  const int to = 1 - from;
  s.cur = to;
  s.step = step;
  s.generation = generation;
  const float* r0 = residual_[from].data() + begin;
  float* r = residual_[to].data() + begin;
  float* u = nullptr;
  // a = r + g (with momentum: u = momentum u + g, a = r + u) into r, and
  // in the same pass whether any is NaN or infinite (finite.h).
  uint32_t special = 0;
  if (momentum_ > 0) {
    const float* u0 = velocity_[from].data() + begin;
    u = velocity_[to].data() + begin;
    const float momentum = momentum_;
    for (int64_t i = 0; i < n; ++i) {
      const float v = momentum * u0[i] + g[i];
      const float a = r0[i] + v;
      u[i] = v;
      r[i] = a;
      special |= NonFinite(a);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float a = r0[i] + g[i];
      r[i] = a;
      special |= NonFinite(a);
    }
  }
  if (!Finite(special)) {  // sent whole: the shard refuses it and names the worker
    s.dense = true;
    s.whole.resize(static_cast<size_t>(n) * width);
    EncodeRun(encoding_, r, n, s.whole.data());
    std::fill(r, r + n, 0.0f);
    if (u != nullptr) std::fill(u, u + n, 0.0f);
    return done();
  }
  s.dense = false;
  // A chunk below whole_below keeps the positions set at construction.
  if (!s.all_positions) {
    if (selection_ == Selection::kRandom) {
      // The same positions for a step however often it is encoded (a
      // redone step, another transport): a function of the seed, the
      // step and the chunk only.
      RandomKPositions(n, Kept(n, step), ChunkSeed(seed_, step, chunk),
                       &s.indices);
    } else {
      TopKPositions(r, n, Kept(n, step), &s.indices);
    }
  }
  const int64_t k = static_cast<int64_t>(s.indices.size());
  thread_local std::vector<float> picked;
  picked.resize(k);
  for (int64_t j = 0; j < k; ++j) picked[j] = r[s.indices[j]];
  EncodeRun(encoding_, picked.data(), k, s.values.data());
  // What was sent (decoded) leaves the residual; bf16's rounding error
  // stays in it.
  DecodeRun(encoding_, s.values.data(), k, picked.data());
  for (int64_t j = 0; j < k; ++j) r[s.indices[j]] -= picked[j];
  if (u != nullptr && !s.all_positions) {  // momentum factor masking
    for (const uint32_t i : s.indices) u[i] = 0.0f;
  }
  return done();
}

}  // namespace fulcrum
