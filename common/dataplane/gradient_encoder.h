// How a worker's gradient goes on the wire, chunk by chunk: in the job's
// wire.gradients encoding (fp32 leaves from the gradient itself, no copy;
// bf16/fp16 are narrowed into a buffer of the encoder's), and with
// wire.topk or wire.randomk sparsified with error feedback (Stich et al.,
// "Sparsified SGD with memory", 2018; Lin et al., "Deep Gradient
// Compression", 2018):
//
//   a = g + r              the chunk's gradient plus what earlier steps
//                          left out (r: the residual, 0 at first)
//   send k of the a_i (k = max(1, round(fraction * n))), with their
//                          positions in the chunk, ascending: the k
//                          largest |a_i| (top-k, topk.h), or k drawn
//                          without looking at them (random-k, randomk.h:
//                          one per stratum of n / k, from a seed of the
//                          worker's, the step and the chunk)
//   r = a - what was sent  (decoded: bf16's rounding error carries too)
//
// so that every gradient element reaches the shards eventually, delayed
// rather than dropped. The shard adds the k values into its accumulator
// (sum of g_i n_i) where a dense push would add n values.
//
// A step's chunk is encoded once per generation: a channel that sends it
// again (a reconnect) gets the same bytes, and the residual moves once. A
// step sent in one generation and redone in the next (a membership change
// undid it) starts again from the residual as it was before the step, so
// an undone step leaves no trace in it. One encoder per worker, kept
// across generations (WorkerSession owns it; each generation's channel
// borrows it). A chunk whose values are not all finite is sent dense,
// uncompressed (the shard refuses it and names the worker), and its
// residual restarts at 0.
//
// Memory: sparse, two floats per model element (the residual, and as it
// was before the step; two more with momentum correction) plus each
// chunk's last encoding (~fraction x 8 bytes per element); dense, a
// buffer of the encoded gradient when it is not fp32, allocated at the
// first chunk encoded without a `room` (a worker whose chunks all go into
// shared-memory slots never allocates it).
//
// Thread safety: Encode may run for different chunks on different threads
// at once (each channel stream sends its own partitions); one chunk is
// encoded by one thread at a time.
#ifndef FULCRUM_COMMON_DATAPLANE_GRADIENT_ENCODER_H_
#define FULCRUM_COMMON_DATAPLANE_GRADIENT_ENCODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/call_once.h"

#include "absl/strings/string_view.h"
#include "common/dataplane/payload.h"
#include "common/tensor/layout.h"

namespace fulcrum {

class GradientEncoder {
 public:
  // How a sparse chunk's positions are chosen.
  enum class Selection { kTopK, kRandom };

  struct Options {
    // The chunks of the layout's partitions are cut every `chunk_elems`
    // elements (ForEachChunk) and sent in `encoding`.
    int64_t chunk_elems = 1;
    WireEncoding encoding = WireEncoding::kFp32;
    // In (0, 1] sparsifies (by `selection`; kRandom draws from `seed`,
    // which should differ between workers so that their positions do); 0
    // sends the chunks dense.
    double fraction = 0;
    // > 0: the fraction kept starts at 1 and falls geometrically to
    // `fraction` over that many steps (fraction^(step / warmup): Deep
    // Gradient Compression's sparsity warm-up).
    int64_t warmup_steps = 0;
    // > 0 (sparse only): the momentum is the worker's (DGC's momentum
    // correction): u = momentum u + g, then a = u + r as above, and the
    // positions sent restart at 0 in u as in r (momentum factor masking:
    // measured here, 1.2-1.4x dense's steps to 0.88 at 1% against
    // 1.4-1.8x without it); the shards then apply plain SGD to the sum
    // (MomentumOnWorkers). With masking, keeping everything (fraction 1)
    // is plain SGD, not momentum SGD: the masking is meant for sparse
    // wires.
    float momentum = 0.0f;
    Selection selection = Selection::kTopK;
    uint64_t seed = 0;
    // A sparse encoder's chunk of fewer elements is sent whole every step
    // (all its positions) and keeps its momentum (no masking: with the
    // shards' plain SGD that is momentum SGD there, as on a dense wire) -
    // wire.sparse_min_bytes.
    int64_t whole_below = 0;
  };

  // `layout` is not owned and must outlive the encoder.
  GradientEncoder(const ParameterLayout* layout, const Options& options);

  WireEncoding encoding() const { return encoding_; }
  bool sparse() const { return fraction_ > 0; }
  Selection selection() const { return selection_; }
  int64_t chunk_elems() const { return chunk_elems_; }
  // The bytes of the dense buffer allocated so far (0 until a chunk is
  // encoded without a room; tests: read on the thread that encoded).
  size_t dense_buffer_bytes() const {
    return encoded_ == nullptr ? 0
                               : static_cast<size_t>(layout_->total_size()) *
                                     ElementBytes(encoding_);
  }

  struct Chunk {
    const char* data = nullptr;  // elements in encoding()
    size_t bytes = 0;
    // Sparse: the positions of data's elements in the chunk, uint32
    // little-endian, ascending. Empty: data is the whole chunk.
    absl::string_view indices;
  };
  // Chunk [offset, offset + n) of partition `partition` of the flat
  // gradient `grads` (layout->total_size() floats), for `step` of
  // `generation`. Valid until this chunk is encoded again. `room` (may be
  // null: n * 4 bytes when not) is where the caller will put the chunk: a
  // dense narrowed chunk is written there directly (data == room), one
  // pass instead of a narrowing and a copy; fp32 and sparse chunks still
  // point at the gradient or the encoder's own buffers.
  Chunk Encode(int32_t partition, int64_t offset, int64_t n,
               const float* grads, int64_t step, int64_t generation,
               char* room = nullptr);

  // The k of a chunk of n elements at `step`.
  int64_t Kept(int64_t n, int64_t step) const;
  // The residual (tests): layout->total_size() floats; empty when dense.
  std::vector<float> residual() const;

 private:
  struct Sparse {
    int64_t step = -1;
    int64_t generation = -1;
    std::vector<uint32_t> indices;
    // Encoded; allocated once (gRPC may still reference the last bytes
    // sent when the next step overwrites them, never freed memory).
    std::vector<char> values;
    std::vector<char> whole;  // sent whole (a non-finite value): allocated then
    bool dense = false;
    bool all_positions = false;  // below whole_below: sent whole every step
    int cur = 0;  // residual_[cur] (velocity_[cur]) is the newest state
  };
  Chunk EncodeSparse(Sparse& s, int64_t chunk, int64_t begin, int64_t n,
                     const float* g, int64_t step, int64_t generation);

  const ParameterLayout* const layout_;
  const int64_t chunk_elems_;
  const WireEncoding encoding_;
  const double fraction_;
  const int64_t warmup_steps_;
  const float momentum_;
  const Selection selection_;
  const uint64_t seed_;
  const int64_t whole_below_;
  // Dense, not fp32: chunks encoded without a room, by flat element;
  // allocated once, at the first (Encode runs on several threads).
  absl::once_flag encoded_once_;
  std::unique_ptr<char[]> encoded_;
  // Sparse: per chunk (first_chunk_[partition] + offset / chunk_elems).
  std::vector<int64_t> first_chunk_;
  std::vector<Sparse> chunks_;
  // By flat element, twice: a step reads one and writes the other, so the
  // state before the newest step stays (a redone step starts from it)
  // without a copy. Each chunk's `cur` says which is newest.
  std::vector<float> residual_[2];
  std::vector<float> velocity_[2];  // momentum > 0
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_GRADIENT_ENCODER_H_
