// A tensor run as the data plane carries it: elements in a wire encoding
// (fp32, bf16 or fp16), held in one or more pieces of memory that belong to
// someone else - the sender's own gradient buffer, or the slices a message
// arrived in - so that nobody copies a payload just to look at it. The
// kernels decode, accumulate and check runs of encoded elements in one
// pass each, reading through memcpy (pieces need not be aligned).
//
// bf16 is the top half of an fp32 (same exponent range, 8 bits of
// mantissa); fp16 is IEEE binary16 (5-bit exponent: |x| <= 65504). Encoding
// rounds to nearest, ties to even; fp16 saturates finite values beyond its
// range at +-65504 (an overflow is not a NaN); NaN and infinity stay what
// they are, so the shard's non-finite check still sees them.
//
// Thread safety: a Payload is a value (its pieces are not owned and must
// outlive it); the functions are pure.
#ifndef FULCRUM_COMMON_DATAPLANE_PAYLOAD_H_
#define FULCRUM_COMMON_DATAPLANE_PAYLOAD_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fulcrum {

// The values are those of fulcrum.v1.Encoding.
enum class WireEncoding : uint8_t { kFp32 = 1, kBf16 = 2, kFp16 = 3 };

inline int ElementBytes(WireEncoding e) {
  return e == WireEncoding::kFp32 ? 4 : 2;
}
const char* EncodingName(WireEncoding e);
// "fp32" | "bf16" | "fp16"; INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<WireEncoding> ParseEncoding(absl::string_view name,
                                           absl::string_view field);
// A fulcrum.v1.Encoding value (0, unspecified, is fp32); INVALID_ARGUMENT
// naming `field` for an unknown one.
absl::StatusOr<WireEncoding> EncodingFromProto(int value,
                                               absl::string_view field);

class Payload {
 public:
  Payload() = default;
  // One piece.
  Payload(const void* data, size_t bytes,
          WireEncoding encoding = WireEncoding::kFp32)
      : encoding_(encoding) {
    Add(data, bytes);
  }

  void set_encoding(WireEncoding e) { encoding_ = e; }
  void Add(const void* data, size_t bytes) {
    if (bytes == 0) return;
    pieces_.push_back({static_cast<const char*>(data), bytes});
    bytes_ += bytes;
  }
  void Clear() {
    pieces_.clear();
    bytes_ = 0;
  }

  WireEncoding encoding() const { return encoding_; }
  size_t bytes() const { return bytes_; }
  int64_t elements() const {
    return static_cast<int64_t>(bytes_) / ElementBytes(encoding_);
  }
  size_t num_pieces() const { return pieces_.size(); }

  // Calls f(const char* data, size_t bytes) for each piece, in order.
  template <typename F>
  void ForEachPiece(F&& f) const {
    for (const Piece& piece : pieces_) f(piece.data, piece.bytes);
  }

  // Calls f(const char* run, int64_t first, int64_t count) for runs of
  // whole encoded elements, in order (first: the run's index in the
  // payload). An element split between two pieces comes as a run of one,
  // assembled in a local buffer. Trailing bytes of a partial element are
  // not passed (bytes() % ElementBytes() is the caller's to check).
  template <typename F>
  void ForEachRun(F&& f) const {
    const size_t width = ElementBytes(encoding_);
    char carry[4];
    size_t carried = 0;
    int64_t next = 0;
    for (const Piece& piece : pieces_) {
      const char* p = piece.data;
      size_t n = piece.bytes;
      if (carried > 0) {
        const size_t take = std::min(width - carried, n);
        std::memcpy(carry + carried, p, take);
        carried += take;
        p += take;
        n -= take;
        if (carried < width) continue;
        f(static_cast<const char*>(carry), next++, int64_t{1});
        carried = 0;
      }
      const int64_t whole = static_cast<int64_t>(n / width);
      if (whole > 0) f(p, next, whole);
      next += whole;
      carried = n - whole * width;
      std::memcpy(carry, p + whole * width, carried);
    }
  }

 private:
  struct Piece {
    const char* data;
    size_t bytes;
  };
  absl::InlinedVector<Piece, 4> pieces_;
  size_t bytes_ = 0;
  WireEncoding encoding_ = WireEncoding::kFp32;
};

// Kernels over `n` encoded elements at `src` (any alignment).
// dst[i] = decode(src[i]).
void DecodeRun(WireEncoding e, const char* src, int64_t n, float* dst);
// acc[i] += w * decode(src[i]).
void AddScaledRun(WireEncoding e, const char* src, int64_t n, float w,
                  float* acc);
// dst[i] = 0 + w * decode(src[i]): bit for bit what AddScaledRun makes of
// a zeroed dst, without reading it (a first arrival: one pass less).
void SetScaledRun(WireEncoding e, const char* src, int64_t n, float w,
                  float* dst);
// The largest biased fp32 exponent among the decoded values: 255 when one
// is NaN or infinite, else every |value| < 2^(result - 126).
uint8_t MaxExponentRun(WireEncoding e, const char* src, int64_t n);
// dst = encode(src[0..n)): n * ElementBytes(e) bytes. dst may be src's own
// memory (in-place narrowing, front to back).
void EncodeRun(WireEncoding e, const float* src, int64_t n, char* dst);

// values[i] = decode(encode(values[i])): what a trip over the wire makes of
// them (in-process transports).
void RoundTrip(WireEncoding e, float* values, int64_t n);

// The same over a whole payload; dst/acc hold payload.elements() floats.
void Decode(const Payload& payload, float* dst);
void AddScaled(const Payload& payload, float w, float* acc);
void SetScaled(const Payload& payload, float w, float* dst);
uint8_t MaxExponent(const Payload& payload);

// Sparse payloads (wire.topk): element j of `values` belongs at position
// index[j] of the chunk, the indices uint32 little-endian in `indices`
// (indices.size() / 4 == values.elements(), in range: the caller checks).
// acc[index[j]] += w * decode(values[j]).
void ScatterAddScaled(const Payload& values, absl::string_view indices,
                      float w, float* acc);

// One element (tests, and the rare slow path).
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);
float Fp16ToFloat(uint16_t h);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_PAYLOAD_H_
