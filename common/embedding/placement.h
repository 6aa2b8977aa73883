// Where an embedding row lives: a pure function of its id, used by every
// worker (to split a batch's ids by shard) and every shard (to refuse rows
// that are not its own). It never changes between versions: tables in
// checkpoints were placed by it (placement_test pins its values).
#ifndef FULCRUM_COMMON_EMBEDDING_PLACEMENT_H_
#define FULCRUM_COMMON_EMBEDDING_PLACEMENT_H_

#include <cstdint>

#include "common/hash/hash.h"

namespace fulcrum {

// The shard in [0, num_shards) holding row `id` of any table (a row's
// place does not depend on its table). Mix64 spreads ids that differ only
// in their low or high bits (hashed features, sequential user ids) evenly.
// REQUIRES: num_shards >= 1.
inline int ShardOfRow(uint64_t id, int num_shards) {
  const uint64_t h = Mix64(id ^ 0x6a09e667f3bcc909ULL);
  return static_cast<int>(
      (static_cast<unsigned __int128>(h) * static_cast<uint64_t>(num_shards)) >>
      64);
}

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_EMBEDDING_PLACEMENT_H_
