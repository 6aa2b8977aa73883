// Where an embedding row lives: a pure function of its id, used by every
// worker (to split a batch's ids by shard) and every shard (to refuse rows
// that are not its own). It never changes between versions: tables in
// checkpoints were placed by it (placement_test pins its values).
#ifndef FULCRUM_COMMON_EMBEDDING_PLACEMENT_H_
#define FULCRUM_COMMON_EMBEDDING_PLACEMENT_H_

#include <cstdint>

namespace fulcrum {

// A 64-bit mixing function (SplitMix64's finalizer): every input bit
// affects every output bit, so ids that differ only in their low or high
// bits (hashed features, sequential user ids) spread evenly.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The shard in [0, num_shards) holding row `id` of any table (a row's
// place does not depend on its table). REQUIRES: num_shards >= 1.
inline int ShardOfRow(uint64_t id, int num_shards) {
  const uint64_t h = Mix64(id ^ 0x6a09e667f3bcc909ULL);
  return static_cast<int>(
      (static_cast<unsigned __int128>(h) * static_cast<uint64_t>(num_shards)) >>
      64);
}

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_EMBEDDING_PLACEMENT_H_
