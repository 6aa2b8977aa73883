#include "server/coordinator/member_registry.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fulcrum {

std::string MemberRegistry::NewId(const std::string& prefix, bool* persist) {
  const int64_t n = next_++;
  *persist = next_ > reserved_;
  if (*persist) reserved_ = next_ + kIdBlock;  // one record per block
  return absl::StrCat(prefix, n);
}

void MemberRegistry::FillCounters(v1::IdCounters* out) const {
  out->set_next_member(std::max(next_, reserved_));
}

void MemberRegistry::Restore(const v1::IdCounters& counters, bool recovered) {
  next_ = std::max(next_, counters.next_member());
  reserved_ = next_;
  recovered_ = recovered;
}

WorkerMember& MemberRegistry::AddWorker(const v1::RegisterWorkerRequest& r,
                                        absl::Time now, bool* persist) {
  WorkerMember w;
  w.id = NewId("w-", persist);
  w.hostname = r.hostname();
  w.host_id = r.host_id();
  w.device = r.device().empty() ? "cpu" : r.device();
  w.pinned_job = r.job_id();
  w.last_heartbeat = now;
  const std::string id = w.id;
  return workers_[id] = std::move(w);
}

ShardMember& MemberRegistry::AddShard(const std::string& address,
                                      absl::Time now, bool* persist) {
  // A process registering at a lapsed shard's address is that shard
  // restarted: the old one must not come back.
  for (auto it = lapsed_shards_.begin(); it != lapsed_shards_.end();) {
    it = it->second.first.address == address ? lapsed_shards_.erase(it)
                                             : std::next(it);
  }
  ShardMember s;
  s.id = NewId("s-", persist);
  s.address = address;
  s.last_heartbeat = now;
  const std::string id = s.id;
  return shards_[id] = std::move(s);
}

WorkerMember* MemberRegistry::FindWorker(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const WorkerMember* MemberRegistry::FindWorker(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

ShardMember* MemberRegistry::FindShard(const std::string& id) {
  auto it = shards_.find(id);
  return it == shards_.end() ? nullptr : &it->second;
}

ShardMember* MemberRegistry::ShardAt(const std::string& address) {
  for (auto& [id, s] : shards_) {
    if (s.address == address) return &s;
  }
  return nullptr;
}

std::vector<std::string> MemberRegistry::IdleWorkers(const std::string& job_id,
                                                     bool external) const {
  std::vector<std::string> idle;
  for (const auto& [id, w] : workers_) {
    // A built-in model is trained by any worker, and by external trainers
    // registered for it (they declared its tensors); an external model only
    // by those.
    const bool fits = w.pinned_job == job_id || (!external && w.pinned_job.empty());
    if (w.job_id.empty() && fits) idle.push_back(id);
  }
  return idle;
}

bool MemberRegistry::Adoptable(const std::string& id,
                               const std::string& prefix) const {
  if (!recovered_ || gone_.count(id) || id.rfind(prefix, 0) != 0) return false;
  int64_t n = 0;
  if (!absl::SimpleAtoi(id.substr(prefix.size()), &n)) return false;
  return n >= 1 && n < next_;
}

WorkerMember& MemberRegistry::AdoptWorker(const std::string& id,
                                          const std::string& hostname,
                                          const std::string& device) {
  WorkerMember& w = workers_[id];
  w.id = id;
  w.hostname = hostname;
  w.device = device.empty() ? "cpu" : device;
  return w;
}

ShardMember& MemberRegistry::AdoptShard(const std::string& id,
                                        const std::string& address) {
  ShardMember& s = shards_[id];
  s.id = id;
  s.address = address;
  return s;
}

MemberRegistry::Expired MemberRegistry::Expire(absl::Time now,
                                               absl::Duration lease) {
  Expired expired;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (now - it->second.last_heartbeat <= lease) {
      ++it;
      continue;
    }
    gone_.insert(it->first);
    lapsed_workers_[it->first] = {it->second, now};
    expired.workers.push_back(std::move(it->second));
    it = workers_.erase(it);
  }
  for (auto it = shards_.begin(); it != shards_.end();) {
    if (now - it->second.last_heartbeat <= lease) {
      ++it;
      continue;
    }
    gone_.insert(it->first);
    lapsed_shards_[it->first] = {std::move(it->second), now};
    expired.shards.push_back(it->first);
    it = shards_.erase(it);
  }
  PruneLapsed(now);
  return expired;
}

void MemberRegistry::PruneLapsed(absl::Time now) {
  // Oldest first: the maps are by id, so find the oldest each time; the
  // count bound is reached only by a flood of lapses.
  auto prune = [now](auto& lapsed) {
    for (auto it = lapsed.begin(); it != lapsed.end();) {
      it = now - it->second.second > kLapsedKeep ? lapsed.erase(it)
                                                 : std::next(it);
    }
    while (lapsed.size() > kLapsedMost) {
      auto oldest = std::min_element(
          lapsed.begin(), lapsed.end(), [](const auto& a, const auto& b) {
            return a.second.second < b.second.second;
          });
      lapsed.erase(oldest);
    }
  };
  prune(lapsed_workers_);
  prune(lapsed_shards_);
}

WorkerMember* MemberRegistry::ReadoptWorker(const std::string& id,
                                            absl::Time now) {
  auto it = lapsed_workers_.find(id);
  if (it == lapsed_workers_.end()) return nullptr;
  WorkerMember& w = workers_[id] = std::move(it->second.first);
  lapsed_workers_.erase(it);
  gone_.erase(id);
  w.last_heartbeat = now;
  return &w;
}

ShardMember* MemberRegistry::ReadoptShard(const std::string& id,
                                          const std::string& address,
                                          absl::Time now) {
  auto it = lapsed_shards_.find(id);
  if (it == lapsed_shards_.end() || it->second.first.address != address ||
      ShardAt(address) != nullptr) {
    return nullptr;
  }
  ShardMember& s = shards_[id] = std::move(it->second.first);
  lapsed_shards_.erase(it);
  gone_.erase(id);
  s.last_heartbeat = now;
  return &s;
}

void MemberRegistry::ExtendLeases(absl::Duration by) {
  for (auto& [id, w] : workers_) {
    w.last_heartbeat += by;
    if (w.preparing) w.prepare_until += by;
  }
  for (auto& [id, s] : shards_) s.last_heartbeat += by;
}

void MemberRegistry::RemoveWorker(const std::string& id) {
  workers_.erase(id);
  lapsed_workers_.erase(id);
  gone_.insert(id);
}

bool MemberRegistry::RemoveShard(const std::string& id) {
  gone_.insert(id);
  lapsed_shards_.erase(id);
  return shards_.erase(id) > 0;
}

std::vector<ShardCandidate> MemberRegistry::Candidates(
    const std::map<std::string, ShardUse>& use) const {
  std::vector<ShardCandidate> out;
  for (const auto& [id, s] : shards_) {
    auto u = use.find(id);
    const ShardUse used = u == use.end() ? ShardUse{} : u->second;
    out.push_back({id, s.address, used.jobs,
                   s.memory_bytes > 0 ? std::max<int64_t>(0, s.memory_bytes -
                                                                 used.bytes)
                                      : -1});
  }
  return out;
}

int64_t MemberRegistry::LargestShardMemory() const {
  int64_t most = -1;
  for (const auto& [id, s] : shards_) {
    if (s.memory_bytes <= 0) return -1;
    most = std::max(most, s.memory_bytes);
  }
  return most;
}

std::vector<v1::Member> MemberRegistry::List(absl::Time now) const {
  std::vector<v1::Member> out;
  for (const auto& [id, w] : workers_) {
    v1::Member m;
    m.set_id(id);
    m.set_role("worker");
    m.set_address(w.hostname);
    m.set_job_id(w.job_id);
    m.set_device(w.device);
    m.set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - w.last_heartbeat));
    out.push_back(std::move(m));
  }
  for (const auto& [id, s] : shards_) {
    v1::Member m;
    m.set_id(id);
    m.set_role("shard");
    m.set_address(s.address);
    m.set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - s.last_heartbeat));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace fulcrum
