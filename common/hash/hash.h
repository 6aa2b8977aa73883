// The project's 64-bit hashes and its one small generator, in one place:
// SplitMix64 (Steele, Lea and Flood, 2014) and FNV-1a. Values never change
// between versions - row placement (placement.h), parameter initialization
// (layout.cc), epoch orders (sampler.cc) and random-k's positions
// (randomk.h) are pinned by them.
//
// Thread safety: pure functions.
#ifndef FULCRUM_COMMON_HASH_HASH_H_
#define FULCRUM_COMMON_HASH_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace fulcrum {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's finalizer: every input bit affects every output bit.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// SplitMix64's next value: advances *state by the golden gamma and mixes.
inline uint64_t SplitMix64Next(uint64_t* state) {
  *state += kGoldenGamma;
  return Mix64(*state);
}

// FNV-1a's 64-bit offset basis.
inline constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;

// FNV-1a over `s`, from `basis` (FNV's offset basis unless given).
inline uint64_t Fnv1a64(absl::string_view s,
                        uint64_t basis = kFnvOffsetBasis) {
  uint64_t h = basis;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_HASH_HASH_H_
