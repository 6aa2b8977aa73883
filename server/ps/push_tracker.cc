#include "server/ps/push_tracker.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

// One pass, the largest exponent: 255 means a NaN or an infinity; else the
// largest |element| is below 2^(top - 126). Only then a second pass finds
// the element to name.
absl::Status CheckFinite(const Partition& p, const PushChunk& c,
                         float* largest) {
  const uint8_t top = MaxExponent(c.data);
  if (top != 0xff) {
    if (largest != nullptr)
      *largest = top == 0 ? 0.0f : std::ldexp(1.0f, static_cast<int>(top) - 127);
    return absl::OkStatus();
  }
  int64_t bad = -1;
  float value = 0.0f;
  c.data.ForEachRun([&](const char* run, int64_t first, int64_t n) {
    for (int64_t i = 0; i < n && bad < 0; ++i) {
      DecodeRun(c.data.encoding(), run + i * ElementBytes(c.data.encoding()),
                1, &value);
      if (!std::isfinite(value)) bad = first + i;
    }
  });
  return absl::InvalidArgumentError(
      absl::StrCat("push.data element ", c.offset + bad, " of partition ",
                   p.id, " is not finite (", value, ")"));
}

// A sparse chunk: as many elements as indices, each index inside the
// chunk and above the one before.
absl::Status CheckIndices(const Partition& p, const PushChunk& c,
                          int64_t length) {
  const int width = ElementBytes(c.data.encoding());
  const int64_t count = static_cast<int64_t>(c.indices.size() / 4);
  if (c.indices.size() % 4 != 0 || count > length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.indices has ", c.indices.size(),
        " bytes: want 4 per element sent, at most ", length,
        " elements (partition ", p.id, " offset ", c.offset, ")"));
  }
  if (static_cast<int64_t>(c.data.bytes()) != count * width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.data has ", c.data.bytes(), " bytes, expected ", count * width,
        " for the ", count, " push.indices (", EncodingName(c.data.encoding()),
        ")"));
  }
  int64_t last = -1;
  for (int64_t j = 0; j < count; ++j) {
    uint32_t at;
    std::memcpy(&at, c.indices.data() + 4 * j, sizeof(at));
    if (static_cast<int64_t>(at) <= last || at >= length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push.indices[", j, "] = ", at, " must be above the one before (",
          last, ") and below the chunk's ", length, " elements (partition ",
          p.id, " offset ", c.offset, ")"));
    }
    last = at;
  }
  return absl::OkStatus();
}

absl::Status CheckRange(const DataRange& r, absl::string_view field) {
  if (r.chunk != -1 && (r.chunk < 0 || r.end < r.begin)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must have chunk >= 0 and end >= begin, got chunk ", r.chunk,
        " [", r.begin, ", ", r.end, ")"));
  }
  return absl::OkStatus();
}

// A pre-reduced push: every share valid, samples their sum, no own range.
absl::Status CheckShares(const PushChunk& c) {
  if (c.shares.empty()) return absl::OkStatus();
  if (c.range.chunk != -1) {
    return absl::InvalidArgumentError(
        "push.range must be unset when push.shares carries the ranges");
  }
  int64_t sum = 0;
  for (size_t i = 0; i < c.shares.size(); ++i) {
    const PushShare& share = c.shares[i];
    if (share.samples < 0 || share.samples > kMaxPushSamples) {
      return absl::InvalidArgumentError(
          absl::StrCat("push.shares[", i, "].samples must be in [0, ",
                       kMaxPushSamples, "], got ", share.samples));
    }
    RETURN_IF_ERROR(
        CheckRange(share.range, absl::StrCat("push.shares[", i, "].range")));
    sum += share.samples;
  }
  if (sum != c.samples) {
    return absl::InvalidArgumentError(
        absl::StrCat("push.samples ", c.samples,
                     " is not the sum of push.shares[].samples (", sum, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

void AddChunk(const PushChunk& c, float w, float* acc) {
  if (c.indices.empty()) {
    AddScaled(c.data, w, acc);
  } else {
    ScatterAddScaled(c.data, c.indices, w, acc);
  }
}

void SetChunk(const PushChunk& c, int64_t length, float w, float* acc) {
  if (c.indices.empty()) {
    SetScaled(c.data, w, acc);
    return;
  }
  std::fill(acc, acc + length, 0.0f);
  ScatterAddScaled(c.data, c.indices, w, acc);
}

void DecodeChunk(const PushChunk& c, int64_t length, float* dst) {
  if (c.indices.empty()) {
    Decode(c.data, dst);
    return;
  }
  std::fill(dst, dst + length, 0.0f);
  ScatterAddScaled(c.data, c.indices, 1.0f, dst);
}

absl::Status ValidatePush(const Partition& p, int64_t chunk_elems,
                          const PushChunk& c, float* largest) {
  if (largest != nullptr) *largest = 0.0f;
  if (c.step < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("push.step must be >= 0, got ", c.step));
  if (c.samples < 0 || c.samples > kMaxPushSamples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.samples must be in [0, ", kMaxPushSamples, "], got ", c.samples));
  }
  RETURN_IF_ERROR(CheckRange(c.range, "push.range"));
  RETURN_IF_ERROR(CheckShares(c));
  if (c.samples == 0) {
    if (c.data.bytes() != 0 || c.offset != 0 || !c.indices.empty()) {
      return absl::InvalidArgumentError(
          "push.data and push.indices must be empty and push.offset 0 when "
          "push.samples is 0");
    }
    return absl::OkStatus();
  }
  if (c.offset < 0 || c.offset >= p.size || c.offset % chunk_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.offset ", c.offset, " is not a chunk boundary of partition ",
        p.id, " (size ", p.size, ", chunk ", chunk_elems, " elements)"));
  }
  const int64_t length = std::min(chunk_elems, p.size - c.offset);
  if (!c.indices.empty()) {
    RETURN_IF_ERROR(CheckIndices(p, c, length));
    return CheckFinite(p, c, largest);
  }
  const int64_t expected = length * ElementBytes(c.data.encoding());
  if (static_cast<int64_t>(c.data.bytes()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push.data has ", c.data.bytes(), " bytes, expected ", expected,
        " for partition ", p.id, " offset ", c.offset, " (",
        EncodingName(c.data.encoding()), ")"));
  }
  return CheckFinite(p, c, largest);
}

void PushTracker::Reset(int members, int64_t num_chunks) {
  num_chunks_ = num_chunks;
  got_.assign(members * num_chunks, 0);
  got_count_.assign(members, 0);
  samples_.assign(members, -1);
  largest_.assign(members, 0.0f);
  complete_.assign(members, 0);
  complete_count_ = 0;
  total_samples_ = 0;
}

absl::Status PushTracker::CheckSamples(int member, int64_t samples) const {
  if (samples_[member] < 0 || samples_[member] == samples)
    return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("push.samples ", samples, " differs from ", samples_[member],
                   " in an earlier chunk of the same step"));
}

absl::StatusOr<PushTracker::Arrival> PushTracker::Record(int member,
                                                         int64_t chunk,
                                                         int64_t samples,
                                                         float largest) {
  if (complete_[member]) return Arrival::kRepeat;
  if (samples > 0 && got_[member * num_chunks_ + chunk]) return Arrival::kRepeat;
  RETURN_IF_ERROR(CheckSamples(member, samples));
  if (samples_[member] < 0) {
    samples_[member] = samples;
    total_samples_ += samples;
  }
  largest_[member] = std::max(largest_[member], largest);
  if (samples > 0) {
    got_[member * num_chunks_ + chunk] = 1;
    if (++got_count_[member] < num_chunks_) return Arrival::kNew;
  }
  complete_[member] = 1;
  ++complete_count_;
  return Arrival::kNew;
}

int PushTracker::LargestMember() const {
  int best = 0;
  for (int m = 1; m < static_cast<int>(largest_.size()); ++m)
    if (largest_[m] > largest_[best]) best = m;
  return best;
}

void PushTracker::ClearMember(int member) {
  std::fill(got_.begin() + member * num_chunks_,
            got_.begin() + (member + 1) * num_chunks_, 0);
  got_count_[member] = 0;
  if (samples_[member] > 0) total_samples_ -= samples_[member];
  samples_[member] = -1;
  largest_[member] = 0.0f;
  if (complete_[member]) --complete_count_;
  complete_[member] = 0;
}

}  // namespace fulcrum
