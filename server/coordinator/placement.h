// Which shard processes serve a job: pure functions of the registered
// shards and their load (running or starting jobs each), unit-tested like
// the parameter layout.
#ifndef FULCRUM_SERVER_COORDINATOR_PLACEMENT_H_
#define FULCRUM_SERVER_COORDINATOR_PLACEMENT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fulcrum {

struct ShardCandidate {
  std::string id;
  std::string address;
  int load = 0;  // jobs it serves (running or starting)
};

// `count` shards for a new job: the least loaded, ties by id (candidates
// come in id order). Fewer than `count` candidates: empty.
std::vector<std::string> PlaceShards(std::vector<ShardCandidate> candidates,
                                     int count);

// A replacement for a lost shard that was at `lost_address`: a shard at
// that address (the process restarted) first, else the least loaded one,
// never one in `excluded` (the job's other shards). nullopt: none.
std::optional<ShardCandidate> ReplacementShard(
    const std::vector<ShardCandidate>& candidates,
    const std::string& lost_address, const std::vector<std::string>& excluded);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_PLACEMENT_H_
