// The coordinator's members: registered workers and shards, their leases,
// the ids it issues (reserved in blocks, persisted so that a restarted
// coordinator never reissues one) and the adoption of members it issued
// before a restart, heard from again.
//
// Thread safety: none; the Coordinator's lock guards it (as leveldb's
// VersionSet is guarded by DBImpl's mutex).
#ifndef FULCRUM_SERVER_COORDINATOR_MEMBER_REGISTRY_H_
#define FULCRUM_SERVER_COORDINATOR_MEMBER_REGISTRY_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "fulcrum/v1/coordinator_state.pb.h"
#include "server/coordinator/placement.h"

namespace fulcrum {

struct WorkerMember {
  std::string id, hostname, device;
  // Where its shared memory can be mapped (host_id.h); host groups form
  // among members with one GroupHost().
  std::string host_id;
  std::string GroupHost() const {
    return host_id.empty() ? "hostname:" + hostname : host_id;
  }
  std::string job_id;      // the job it trains, or was offered
  int64_t generation = 0;  // of job_id, as last reported
  absl::Time last_heartbeat;
  v1::Progress progress;
  // Offered a place in running job job_id, loading its data (not a member
  // yet) until prepare_until.
  bool preparing = false;
  absl::Time prepare_until;
  std::set<std::string> declined;  // jobs whose data it could not load
  // An external trainer (fulcrum.torch) trains this job only; empty: any
  // job of a built-in model.
  std::string pinned_job;
};

struct ShardMember {
  std::string id, address;
  absl::Time last_heartbeat;
  int64_t memory_bytes = 0;  // declared; 0: no limit
};

class MemberRegistry {
 public:
  static constexpr int64_t kIdBlock = 64;  // ids reserved per persisted record

  // Ids: "w-N" and "s-N". *persist is set when the reserved block ran out:
  // the caller records FillCounters() durably before using the id.
  std::string NewId(const std::string& prefix, bool* persist);
  // The counters as persisted (members: past every id reserved).
  void FillCounters(v1::IdCounters* out) const;
  // After a restart: ids below the persisted counter were issued before.
  void Restore(const v1::IdCounters& counters, bool recovered);

  WorkerMember& AddWorker(const v1::RegisterWorkerRequest& r, absl::Time now,
                          bool* persist);
  ShardMember& AddShard(const std::string& address, absl::Time now,
                        bool* persist);
  WorkerMember* FindWorker(const std::string& id);
  const WorkerMember* FindWorker(const std::string& id) const;
  ShardMember* FindShard(const std::string& id);
  ShardMember* ShardAt(const std::string& address);
  const std::map<std::string, WorkerMember>& workers() const {
    return workers_;
  }
  const std::map<std::string, ShardMember>& shards() const { return shards_; }
  // Idle workers that can train `job_id`: the ones registered for it, and
  // for a built-in model the unpinned ones too.
  std::vector<std::string> IdleWorkers(const std::string& job_id,
                                       bool external) const;

  // A member this coordinator issued before it restarted, not gone since:
  // heard from again, it is taken back.
  bool Adoptable(const std::string& id, const std::string& prefix) const;
  WorkerMember& AdoptWorker(const std::string& id, const std::string& hostname,
                            const std::string& device);
  ShardMember& AdoptShard(const std::string& id, const std::string& address);

  // Members whose lease ran out by `now`, removed. They are kept as
  // *lapsed* for kLapsedKeep (at most kLapsedMost of them): a lease runs out
  // for a live process too (paused, swapping, cut off), and its next
  // heartbeat takes it back (Readopt*) with what the coordinator knew of it,
  // instead of making it register as a stranger.
  struct Expired {
    std::vector<WorkerMember> workers;
    std::vector<std::string> shards;
  };
  Expired Expire(absl::Time now, absl::Duration lease);
  static constexpr absl::Duration kLapsedKeep = absl::Minutes(10);
  static constexpr size_t kLapsedMost = 4096;
  // A lapsed member heard from again, back in the registry (its lease
  // renewed at `now`); null when `id` is not lapsed. A shard comes back only
  // at the address it had, and only while no live shard serves it (a
  // process restarted there registered meanwhile).
  WorkerMember* ReadoptWorker(const std::string& id, absl::Time now);
  bool LapsedWorker(const std::string& id) const {
    return lapsed_workers_.count(id) > 0;
  }
  ShardMember* ReadoptShard(const std::string& id, const std::string& address,
                            absl::Time now);
  // Every live member's lease renewed by `by`: the coordinator itself was
  // not running for that long (paused, descheduled), so it heard nobody.
  void ExtendLeases(absl::Duration by);
  // The member left (or restarted): removed, never adopted.
  void RemoveWorker(const std::string& id);
  bool RemoveShard(const std::string& id);

  // The shards as placement candidates, with what they serve (by id).
  std::vector<ShardCandidate> Candidates(
      const std::map<std::string, ShardUse>& use) const;
  // The most bytes a registered shard declares; -1: one declares no limit
  // (or none is registered).
  int64_t LargestShardMemory() const;
  std::vector<v1::Member> List(absl::Time now) const;

 private:
  int64_t next_ = 1;      // the next id's number
  int64_t reserved_ = 0;  // ids below this are persisted as issued
  bool recovered_ = false;
  std::map<std::string, WorkerMember> workers_;
  std::map<std::string, ShardMember> shards_;
  std::set<std::string> gone_;  // expired or left since the restart
  // Expired members that may come back, with the time their lease ran out.
  std::map<std::string, std::pair<WorkerMember, absl::Time>> lapsed_workers_;
  std::map<std::string, std::pair<ShardMember, absl::Time>> lapsed_shards_;
  void PruneLapsed(absl::Time now);
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_MEMBER_REGISTRY_H_
