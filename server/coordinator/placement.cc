#include "server/coordinator/placement.h"

#include <algorithm>

namespace fulcrum {

std::vector<std::string> PlaceShards(std::vector<ShardCandidate> candidates,
                                     int count, int64_t bytes) {
  candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                  [bytes](const ShardCandidate& c) {
                                    return !c.Fits(bytes);
                                  }),
                   candidates.end());
  if (static_cast<int>(candidates.size()) < count) return {};
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const ShardCandidate& a, const ShardCandidate& b) {
                     return a.load < b.load;
                   });
  std::vector<std::string> ids;
  for (int i = 0; i < count; ++i) ids.push_back(candidates[i].id);
  return ids;
}

std::optional<ShardCandidate> ReplacementShard(
    const std::vector<ShardCandidate>& candidates,
    const std::string& lost_address, const std::vector<std::string>& excluded,
    int64_t bytes) {
  std::optional<ShardCandidate> best;
  for (const ShardCandidate& c : candidates) {
    if (std::find(excluded.begin(), excluded.end(), c.id) != excluded.end() ||
        !c.Fits(bytes))
      continue;
    if (c.address == lost_address) return c;
    if (!best.has_value() || c.load < best->load) best = c;
  }
  return best;
}

}  // namespace fulcrum
