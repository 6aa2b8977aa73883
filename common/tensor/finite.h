// Branch-free non-finite checks for loops that vectorize: OR NonFinite(x)
// of every value into one flag and test it once with Finite(flags), where
// a float reduction or a branch per element would not vectorize.
//
// Thread safety: pure functions.
#ifndef FULCRUM_COMMON_TENSOR_FINITE_H_
#define FULCRUM_COMMON_TENSOR_FINITE_H_

#include <cstdint>
#include <cstring>

namespace fulcrum {

// Bit 31 set when v is NaN or infinite (its exponent bits all set: adding
// one exponent step carries into bit 31). Three integer operations.
inline uint32_t NonFinite(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return (bits & 0x7f800000u) + 0x00800000u;
}

// Whether no value OR-ed into `flags` (NonFinite) was NaN or infinite.
inline bool Finite(uint32_t flags) { return (flags >> 31) == 0; }

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TENSOR_FINITE_H_
