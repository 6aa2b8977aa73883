// Which shard processes serve a job: pure functions of the registered
// shards and their load (running or starting jobs each), unit-tested like
// the parameter layout.
#ifndef FULCRUM_SERVER_COORDINATOR_PLACEMENT_H_
#define FULCRUM_SERVER_COORDINATOR_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fulcrum {

struct ShardCandidate {
  std::string id;
  std::string address;
  int load = 0;  // jobs it serves (running or starting)
  // Bytes it may still take (declared memory minus its jobs'); -1: no
  // limit declared.
  int64_t free_bytes = -1;
  bool Fits(int64_t bytes) const { return free_bytes < 0 || bytes <= free_bytes; }
};

// What a shard serves: running or starting jobs, and their bytes.
struct ShardUse {
  int jobs = 0;
  int64_t bytes = 0;
};

// `count` shards for a new job, each with `bytes` free: the least loaded,
// ties by id (candidates come in id order). Fewer such candidates: empty.
std::vector<std::string> PlaceShards(std::vector<ShardCandidate> candidates,
                                     int count, int64_t bytes = 0);

// A replacement for a lost shard that was at `lost_address`: a shard at
// that address (the process restarted) first, else the least loaded one,
// never one in `excluded` (the job's other shards), and one with `bytes`
// free. nullopt: none.
std::optional<ShardCandidate> ReplacementShard(
    const std::vector<ShardCandidate>& candidates,
    const std::string& lost_address, const std::vector<std::string>& excluded,
    int64_t bytes = 0);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_PLACEMENT_H_
