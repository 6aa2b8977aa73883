// The coordinator's core: the job table and its state machine
// (PENDING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED), worker and shard
// registration with heartbeat leases, assignment of workers and shards to
// jobs, elastic membership (generations), recovery of lost shards from
// checkpoints, data chunk leases, and job progress from worker reports. No
// gRPC types: shards are driven through the ShardControl interface.
//
// Membership (architecture §5): a running job has the members it wants
// (joins, leaves, losses change them at once) and the generation the shards
// serve. A "round" moves the shards to the next generation: InitJob on any
// replacement shard, Reconfigure phase 1 on every shard (adopt the
// generation, restoring a checkpoint after a shard loss), then phase 2
// (align every partition to the lowest version any shard reported). Workers
// see the new generation in heartbeat assignments once a round commits.
// Chunk leases end with their generation: each commit rebuilds the chunk
// table from the shards' data ledger, so what the parameters include is the
// only truth about which samples were trained.
//
// Thread safety: every public method is safe to call concurrently.
// Background work (lease expiry, scheduling) runs in Tick(), called by the
// thread Start() owns, or directly by tests.
#ifndef FULCRUM_SERVER_COORDINATOR_COORDINATOR_CORE_H_
#define FULCRUM_SERVER_COORDINATOR_COORDINATOR_CORE_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "fulcrum/v1/parameter_server.pb.h"
#include "server/coordinator/state_store.h"

namespace fulcrum {

// The coordinator's calls into parameter shards.
class ShardControl {
 public:
  virtual ~ShardControl() = default;
  virtual absl::Status InitJob(const std::string& address,
                               const v1::InitJobRequest& request) = 0;
  // Best effort: the job's streams end on that shard.
  virtual void EndJob(const std::string& address,
                      const std::string& job_id) = 0;
  virtual absl::StatusOr<v1::ReconfigureResponse> Reconfigure(
      const std::string& address, const v1::ReconfigureRequest& request) = 0;
};

class Coordinator {
 public:
  struct Options {
    absl::Duration heartbeat_interval = absl::Seconds(1);
    absl::Duration lease = absl::Seconds(5);
    // Once workers.min workers are idle, wait this long for up to
    // workers.max before starting a job.
    absl::Duration start_grace = absl::Seconds(1);
    // How long a worker offered a place in a running job may take to load
    // the job's data before the offer lapses (it is idle again).
    absl::Duration prepare_timeout = absl::Seconds(60);
    absl::Duration tick = absl::Milliseconds(100);
    std::function<absl::Time()> now = [] { return absl::Now(); };
    // Called (outside any lock the caller could hold) when a lease expires;
    // role is "worker" or "shard". May be null.
    std::function<void(const std::string& role)> on_member_lost;
    // Durable state (state_store.h); empty: none, a restart forgets jobs.
    std::string state_dir;
  };

  // `shards` is not owned and must outlive the coordinator.
  Coordinator(Options options, ShardControl* shards);
  ~Coordinator();

  // Loads the durable state (Options::state_dir) before Start(): jobs come
  // back, running ones wait up to a lease for their workers and shards to
  // re-adopt themselves with heartbeats, then move to a new generation.
  absl::Status Recover();
  void Start();
  void Stop();
  // Expires leases and starts pending jobs. Calls ShardControl without
  // holding the lock.
  void Tick();

  absl::StatusOr<std::string> SubmitJob(v1::JobSpec spec);
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& job_id) const;
  std::vector<v1::JobStatus> ListJobs() const;
  absl::StatusOr<v1::JobStatus> CancelJob(const std::string& job_id);

  v1::RegisterWorkerResponse RegisterWorker(
      const v1::RegisterWorkerRequest& request);
  absl::StatusOr<v1::WorkerHeartbeatResponse> WorkerHeartbeat(
      const v1::WorkerHeartbeatRequest& request);
  absl::StatusOr<v1::RegisterShardResponse> RegisterShard(
      const v1::RegisterShardRequest& request);
  absl::StatusOr<v1::ShardHeartbeatResponse> ShardHeartbeat(
      const v1::ShardHeartbeatRequest& request);
  absl::Status Leave(const std::string& member_id);
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request);
  std::vector<v1::Member> ListMembers() const;
  absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest& request);

 private:
  struct Worker {
    std::string id, hostname, device, job_id;
    int64_t generation = 0;  // of job_id, as last reported
    absl::Time last_heartbeat;
    v1::Progress progress;
    // Offered a place in running job job_id, loading its data (not a
    // member yet) until this time.
    bool preparing = false;
    absl::Time prepare_until;
    std::set<std::string> declined;  // jobs whose data it could not load
  };
  struct Shard {
    std::string id, address;
    absl::Time last_heartbeat;
  };
  struct Chunk {
    int64_t begin = 0, end = 0;  // positions in the epoch's order
    int64_t next = 0;            // where the next lease starts
    std::string holder;          // worker holding the lease, if any
    bool done = false;           // every sample pushed (or in the ledger)
  };
  struct Job {
    v1::JobStatus status;
    // Membership wanted for the next generation; status.workers is the
    // generation the shards serve.
    std::vector<std::string> members;
    bool finishing = false;       // a worker reported done: no more rounds
    bool round_in_flight = false;
    std::set<int> missing_shards;  // shard indexes whose shard was lost
    std::set<int> fresh_shards;    // replacements that need InitJob
    bool restore = false;          // the next round restores a checkpoint
    std::set<int64_t> bad_checkpoints;  // failed to restore
    // Checkpoint steps on disk, by shard index (from heartbeats).
    std::map<int, std::vector<int64_t>> checkpoint_steps;
    // Coordinator restart: rounds wait until then for members to return.
    bool recovering = false;
    absl::Time recover_after = absl::InfinitePast();
    bool force_round = false;  // a new generation even with the same members
    // Chunk sharding.
    int64_t dataset_size = -1;
    std::map<int64_t, Chunk> chunks;  // by id; epochs created as reached
    std::map<int64_t, v1::LedgerEntry> ledger;  // latest from the shards
    bool starting = false;                          // InitJob calls in flight
    absl::Time ready_since = absl::InfinitePast();  // min workers idle since
    std::vector<std::string> shard_addresses;
    std::map<std::string, v1::StalenessSummary> staleness;  // by shard id
    std::map<std::string, int64_t> samples;  // trained so far, by worker id
    // Stalled sync steps in each shard's latest report, by shard id.
    std::map<std::string, std::vector<v1::Stall>> stalls;
  };
  struct Launch {  // a job whose shards must be initialised
    std::string job_id;
    std::vector<std::pair<std::string, v1::InitJobRequest>> inits;
  };
  struct EndCall {
    std::string address, job_id;
  };
  struct Round {  // a job's move to the next generation
    std::string job_id;
    int64_t generation = 0;
    std::vector<std::string> workers;
    std::vector<std::string> addresses;  // by shard index
    std::vector<std::pair<std::string, v1::InitJobRequest>> inits;
    bool restore = false;
    std::set<int64_t> bad_checkpoints;  // not to be restored
  };

  void ExpireLeases(absl::Time now, std::vector<std::string>* lost)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Schedule(absl::Time now, std::vector<Launch>* launches)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Job& job, v1::JobState state, const std::string& message,
              std::vector<EndCall>* ends) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunEnds(const std::vector<EndCall>& ends);
  void PlanRounds(absl::Time now, std::vector<Round>* rounds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Grow(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunRound(const Round& round);
  // The worker left the job (left, lost or failed): out of the wanted
  // membership, its chunk lease returns to the queue.
  void DropMember(Job& job, const std::string& worker, const std::string& kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseShard(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Chunk geometry and table.
  static int64_t ChunksPerEpoch(const Job& job);
  static void EnsureEpoch(Job& job, int64_t epoch);
  static void RebuildChunks(Job& job);
  // Durable state: records a job's current state (logging failures).
  absl::Status Persist(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static v1::PersistedJob ToPersisted(const Job& job);
  void PersistCounters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The id counters as persisted (members: past every id reserved).
  void FillCounters(v1::IdCounters* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewMemberId(const std::string& prefix)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A member this coordinator issued before a restart, heard from again.
  bool Adoptable(const std::string& id, const std::string& prefix) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void AddEvent(Job& job, const std::string& kind, const std::string& member,
                int64_t step = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> IdleWorkers() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshProgress(Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool Terminal(v1::JobState s);

  const Options options_;
  ShardControl* const shards_;  // Not owned.
  std::thread ticker_;
  absl::Notification stop_;

  mutable absl::Mutex mu_;
  int64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_member_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> job_order_ ABSL_GUARDED_BY(mu_);  // submission order
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Shard> shard_members_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StateStore> store_ ABSL_GUARDED_BY(mu_);
  int64_t reserved_member_ ABSL_GUARDED_BY(mu_) = 0;  // ids persisted below
  bool recovered_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> gone_ ABSL_GUARDED_BY(mu_);  // expired or left since
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_COORDINATOR_CORE_H_
