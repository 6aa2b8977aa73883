// What both aggregation algorithms share about pushes: the push itself, its
// validation, and the per-step bookkeeping of which chunks each member has
// sent, which makes pushes idempotent (a repeated chunk is acknowledged and
// never applied twice).
#ifndef FULCRUM_SERVER_PS_PUSH_TRACKER_H_
#define FULCRUM_SERVER_PS_PUSH_TRACKER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dataplane/payload.h"
#include "common/tensor/layout.h"
#include "server/ps/data_ledger.h"

namespace fulcrum {

// One member's part of a pre-reduced push (Push.shares).
struct PushShare {
  int64_t samples = 0;
  DataRange range;
};

// One chunk of one member's gradient for one partition at one step - or,
// pre-reduced (wire.pre_reduce), of the sum of several members' gradients,
// each one's samples and range in `shares`.
struct PushChunk {
  int64_t step = 0;
  int32_t partition = 0;
  int64_t offset = 0;   // elements from the partition start
  int64_t samples = 0;  // 0: this worker has no gradient for the step
  // The elements, in their wire encoding (push.encoding), in pieces that
  // are not owned (the message's slices, or the sender's buffer).
  Payload data;
  // Sparse (wire.topk): the positions in the chunk of data's elements,
  // uint32 little-endian, ascending; the chunk's other elements are 0.
  // Empty: data is the whole chunk. Not owned either.
  absl::string_view indices;
  bool stop = false;
  int64_t generation = 1;  // of the pushing stream
  DataRange range;         // chunk sharding: the samples behind it
  // Pre-reduced: one per member the stream pushes for, in its order;
  // samples is their sum, range unset. Empty: the stream's one member.
  std::vector<PushShare> shares;
  // Its largest |element|, to within a factor 2 (at most twice this);
  // ValidatePush finds it.
  float largest = 0.0f;
};

// What a push did.
enum class PushOutcome {
  kPartial,          // the member's contribution still misses chunks
  kCompleted,        // this push completed it
  kAlreadyComplete,  // a repeat: complete (or applied) before
};

// The most samples one push may stand for: a step's sum over 1024 workers
// stays far from overflowing (2^62 samples twice wrapped the sum and
// silently dropped a step).
inline constexpr int64_t kMaxPushSamples = int64_t{1} << 32;

// INVALID_ARGUMENT naming the field when `c` cannot be a chunk of
// `partition` cut at `chunk_elems`: step negative, samples outside [0,
// kMaxPushSamples], a bad range (or shares: a bad one, or samples not
// their sum),
// offset or length, or a NaN/infinite element. One branch-free pass over the
// data (it vectorizes); the bad element is looked for only when there is one.
// The same pass finds the largest |element| (*largest, if not null): which
// member's push made a step's update non-finite.
absl::Status ValidatePush(const Partition& partition, int64_t chunk_elems,
                          const PushChunk& c, float* largest = nullptr);

// The chunk's elements: acc[i] += w * element i (a dense chunk's every
// element, a sparse one's listed ones), acc pointing at the chunk's start.
void AddChunk(const PushChunk& c, float w, float* acc);
// The same into an accumulator whose `length` elements hold nothing of the
// step yet: acc = w * the chunk (a sparse chunk's others 0), bit for bit
// AddChunk on zeros, without reading or clearing acc first.
void SetChunk(const PushChunk& c, int64_t length, float w, float* acc);
// dst = the chunk's `length` elements (a sparse chunk's others are 0).
void DecodeChunk(const PushChunk& c, int64_t length, float* dst);

// One partition's arrivals for the current step, per member.
//
// Thread safety: none; the partition's lock guards it.
class PushTracker {
 public:
  enum class Arrival { kNew, kRepeat };

  void Reset(int members, int64_t num_chunks);
  // Records chunk `chunk` (ignored when samples == 0: an empty push is the
  // member's whole contribution). kRepeat, changing nothing, for a chunk
  // seen before or a member already complete; INVALID_ARGUMENT, changing
  // nothing, when `samples` differs from the member's earlier chunks.
  // `largest`: the chunk's largest |element|, kept per member for the step.
  absl::StatusOr<Arrival> Record(int member, int64_t chunk, int64_t samples,
                                 float largest = 0.0f);
  // What Record would refuse, changing nothing: INVALID_ARGUMENT when
  // `samples` differs from the member's earlier chunks of the step (also
  // once it is complete: a pre-reduced push's shares are checked so).
  absl::Status CheckSamples(int member, int64_t samples) const;
  // Every chunk of the member arrived (or its empty push).
  bool Complete(int member) const { return complete_[member] != 0; }
  int complete_count() const { return complete_count_; }
  int members() const { return static_cast<int>(complete_.size()); }
  // Sum of the samples of every member that pushed anything.
  int64_t total_samples() const { return total_samples_; }
  // The member whose pushes this step held the largest |element|.
  int LargestMember() const;
  float Largest(int member) const { return largest_[member]; }
  // Forgets the member's arrivals (it moves on to its next step).
  void ClearMember(int member);

 private:
  int64_t num_chunks_ = 1;
  std::vector<uint8_t> got_;  // [member * num_chunks + chunk]
  std::vector<int64_t> got_count_;
  std::vector<int64_t> samples_;  // -1: nothing pushed yet
  std::vector<float> largest_;
  std::vector<uint8_t> complete_;
  int complete_count_ = 0;
  int64_t total_samples_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_PUSH_TRACKER_H_
