#include "common/dataplane/payload.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fulcrum {
namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t Load16(const char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline float Load32(const char* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

inline uint16_t ToBf16(float f) {
  uint32_t u = Bits(f);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t quiet = (u >> 16) | 0x40u;  // a NaN stays a NaN
  u += 0x7fffu + ((u >> 16) & 1u);            // to nearest, ties to even
  return static_cast<uint16_t>(nan ? quiet : u >> 16);
}


// After F. Giesen's float_to_half_fast3_rtne, saturating finite overflow.
inline uint16_t ToFp16(float x) {
  uint32_t f = Bits(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  uint32_t o;
  if (f >= 0x47800000u) {  // >= 2^16, infinite or NaN
    o = f > 0x7f800000u ? 0x7e00u : (f == 0x7f800000u ? 0x7c00u : 0x7bffu);
  } else if (f < 0x38800000u) {  // below 2^-14: subnormal or zero
    o = Bits(FromBits(f) + 0.5f) - 0x3f000000u;
  } else {
    const uint32_t odd = (f >> 13) & 1u;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
    o = f >> 13;
    if (o >= 0x7c00u) o = 0x7bffu;  // rounded past 65504: saturate
  }
  return static_cast<uint16_t>(o | sign);
}

// After F. Giesen's half_to_float.
inline float FromFp16(uint16_t h) {
  uint32_t o = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = o & 0x0f800000u;
  o += static_cast<uint32_t>(127 - 15) << 23;
  if (exp == 0x0f800000u) {
    o += static_cast<uint32_t>(128 - 16) << 23;  // infinity, NaN
  } else if (exp == 0) {                          // subnormal
    o += 1u << 23;
    o = Bits(FromBits(o) - FromBits(113u << 23));
  }
  return FromBits(o | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

// The element at `src` (encoded) as a float.
template <WireEncoding E>
inline float DecodeOne(const char* src) {
  if constexpr (E == WireEncoding::kFp32) return Load32(src);
  if constexpr (E == WireEncoding::kBf16)
    return FromBits(static_cast<uint32_t>(Load16(src)) << 16);
  return FromFp16(Load16(src));
}

template <WireEncoding E>
void DecodeT(const char* src, int64_t n, float* dst) {
  constexpr int w = E == WireEncoding::kFp32 ? 4 : 2;
  for (int64_t i = 0; i < n; ++i) dst[i] = DecodeOne<E>(src + w * i);
}

template <WireEncoding E>
void AddScaledT(const char* src, int64_t n, float wt, float* acc) {
  constexpr int w = E == WireEncoding::kFp32 ? 4 : 2;
  for (int64_t i = 0; i < n; ++i) acc[i] += DecodeOne<E>(src + w * i) * wt;
}

// "+ 0.0f": -0 becomes +0, as it does added to a zeroed accumulator.
template <WireEncoding E>
void SetScaledT(const char* src, int64_t n, float wt, float* dst) {
  constexpr int w = E == WireEncoding::kFp32 ? 4 : 2;
  for (int64_t i = 0; i < n; ++i)
    dst[i] = DecodeOne<E>(src + w * i) * wt + 0.0f;
}

// kernel(std::integral_constant<WireEncoding, E>) for e's E: each run
// function below is one loop, compiled once per encoding.
template <typename Kernel>
void ByEncoding(WireEncoding e, Kernel&& kernel) {
  using E = WireEncoding;
  switch (e) {
    case E::kFp32: return kernel(std::integral_constant<E, E::kFp32>{});
    case E::kBf16: return kernel(std::integral_constant<E, E::kBf16>{});
    case E::kFp16: return kernel(std::integral_constant<E, E::kFp16>{});
  }
}

}  // namespace

const char* EncodingName(WireEncoding e) {
  switch (e) {
    case WireEncoding::kFp32: return "fp32";
    case WireEncoding::kBf16: return "bf16";
    case WireEncoding::kFp16: return "fp16";
  }
  return "?";
}

absl::StatusOr<WireEncoding> ParseEncoding(absl::string_view name,
                                           absl::string_view field) {
  if (name == "fp32") return WireEncoding::kFp32;
  if (name == "bf16") return WireEncoding::kBf16;
  if (name == "fp16") return WireEncoding::kFp16;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be one of [fp32, bf16, fp16], got '",
                   name.substr(0, 64), "'"));
}

absl::StatusOr<WireEncoding> EncodingFromProto(int value,
                                               absl::string_view field) {
  if (value == 0 || value == 1) return WireEncoding::kFp32;
  if (value == 2) return WireEncoding::kBf16;
  if (value == 3) return WireEncoding::kFp16;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " ", value, " is not an encoding this shard knows "
                   "(fp32, bf16, fp16)"));
}

uint16_t FloatToBf16(float f) { return ToBf16(f); }
float Bf16ToFloat(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }
uint16_t FloatToFp16(float f) { return ToFp16(f); }
float Fp16ToFloat(uint16_t h) { return FromFp16(h); }

void DecodeRun(WireEncoding e, const char* src, int64_t n, float* dst) {
  if (e == WireEncoding::kFp32) {
    std::memcpy(dst, src, 4 * n);
    return;
  }
  ByEncoding(e, [&](auto enc) { DecodeT<enc()>(src, n, dst); });
}

void SetScaledRun(WireEncoding e, const char* src, int64_t n, float w,
                  float* dst) {
  ByEncoding(e, [&](auto enc) { SetScaledT<enc()>(src, n, w, dst); });
}

void AddScaledRun(WireEncoding e, const char* src, int64_t n, float w,
                  float* acc) {
  ByEncoding(e, [&](auto enc) { AddScaledT<enc()>(src, n, w, acc); });
}

uint8_t MaxExponentRun(WireEncoding e, const char* src, int64_t n) {
  // A byte max vectorizes on plain SSE2 (pmaxub), a 32-bit one does not.
  uint8_t top = 0;
  switch (e) {
    case WireEncoding::kFp32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, src + 4 * i, 4);
        top = std::max(top, static_cast<uint8_t>(bits >> 23));
      }
      return top;
    case WireEncoding::kBf16:
      for (int64_t i = 0; i < n; ++i)
        top = std::max(top, static_cast<uint8_t>(Load16(src + 2 * i) >> 7));
      return top;
    case WireEncoding::kFp16: {
      uint8_t e5 = 0;
      bool subnormal = false;
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = Load16(src + 2 * i);
        e5 = std::max(e5, static_cast<uint8_t>((h >> 10) & 0x1f));
        subnormal |= (h & 0x7fff) != 0;
      }
      if (e5 == 31) return 255;
      if (e5 > 0) return static_cast<uint8_t>(e5 + 112);  // 2^(e5-15) in fp32
      return subnormal ? 112 : 0;  // every value below 2^-14
    }
  }
  return 255;
}

namespace {

// Blocks through local buffers: dst may overlap src (in-place narrowing)
// and the loop still vectorizes (no aliasing between the locals).
template <typename Narrow>
void NarrowBlocks(const float* src, int64_t n, char* dst, Narrow narrow) {
  constexpr int64_t kBlock = 256;
  float in[kBlock];
  uint16_t out[kBlock];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t k = std::min(kBlock, n - at);
    std::memcpy(in, src + at, 4 * k);
    for (int64_t i = 0; i < k; ++i) out[i] = narrow(in[i]);
    std::memcpy(dst + 2 * at, out, 2 * k);
  }
}

void NarrowBf16(const float* src, int64_t n, char* dst) {
  int64_t i = 0;
#if defined(__SSE2__)
  // ToBf16 on 8 floats at a time. The result is shifted arithmetically so
  // that each 32-bit lane holds the 16-bit pattern sign-extended, which the
  // signed saturating pack passes through unchanged. Stores trail loads
  // (2i + 16 <= 4i + 32), so dst may be src.
  const __m128i one = _mm_set1_epi32(1), bias = _mm_set1_epi32(0x7fff),
                abs = _mm_set1_epi32(0x7fffffff),
                inf = _mm_set1_epi32(0x7f800000),
                quiet = _mm_set1_epi32(0x00400000);
  auto narrow = [&](__m128i u) {
    const __m128i rounded = _mm_add_epi32(
        u, _mm_add_epi32(bias, _mm_and_si128(_mm_srli_epi32(u, 16), one)));
    const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, abs), inf);
    const __m128i v = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(u, quiet)),
                                   _mm_andnot_si128(nan, rounded));
    return _mm_srai_epi32(v, 16);
  };
  for (; i + 8 <= n; i += 8) {
    const __m128i a =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                     _mm_packs_epi32(narrow(a), narrow(b)));
  }
#endif
  NarrowBlocks(src + i, n - i, dst + 2 * i,
               [](float f) { return ToBf16(f); });
}

}  // namespace

void EncodeRun(WireEncoding e, const float* src, int64_t n, char* dst) {
  switch (e) {
    case WireEncoding::kFp32:
      if (static_cast<const void*>(src) != dst) std::memmove(dst, src, 4 * n);
      return;
    case WireEncoding::kBf16: NarrowBf16(src, n, dst); return;
    case WireEncoding::kFp16:
      NarrowBlocks(src, n, dst, [](float f) { return ToFp16(f); });
      return;
  }
}

void RoundTrip(WireEncoding e, float* values, int64_t n) {
  if (e == WireEncoding::kFp32) return;
  EncodeRun(e, values, n, reinterpret_cast<char*>(values));
  // Widen back to front: element i's two bytes sit at 2i <= 4i.
  for (int64_t i = n - 1; i >= 0; --i) {
    float v;
    DecodeRun(e, reinterpret_cast<const char*>(values) + 2 * i, 1, &v);
    values[i] = v;
  }
}

void Decode(const Payload& payload, float* dst) {
  payload.ForEachRun([&](const char* run, int64_t first, int64_t n) {
    DecodeRun(payload.encoding(), run, n, dst + first);
  });
}

void AddScaled(const Payload& payload, float w, float* acc) {
  payload.ForEachRun([&](const char* run, int64_t first, int64_t n) {
    AddScaledRun(payload.encoding(), run, n, w, acc + first);
  });
}

void SetScaled(const Payload& payload, float w, float* dst) {
  payload.ForEachRun([&](const char* run, int64_t first, int64_t n) {
    SetScaledRun(payload.encoding(), run, n, w, dst + first);
  });
}

uint8_t MaxExponent(const Payload& payload) {
  uint8_t top = 0;
  payload.ForEachRun([&](const char* run, int64_t, int64_t n) {
    top = std::max(top, MaxExponentRun(payload.encoding(), run, n));
  });
  return top;
}

void ScatterAddScaled(const Payload& values, absl::string_view indices,
                      float w, float* acc) {
  const int width = ElementBytes(values.encoding());
  const char* idx = indices.data();
  values.ForEachRun([&](const char* run, int64_t first, int64_t n) {
    float decoded[256];
    for (int64_t done = 0; done < n;) {
      const int64_t m = std::min<int64_t>(256, n - done);
      DecodeRun(values.encoding(), run + done * width, m, decoded);
      for (int64_t j = 0; j < m; ++j) {
        uint32_t at;
        std::memcpy(&at, idx + 4 * (first + done + j), sizeof(at));
        acc[at] += w * decoded[j];
      }
      done += m;
    }
  });
}

}  // namespace fulcrum
