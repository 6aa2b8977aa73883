// The coordinator's core: the job table and each job's life
// (PENDING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED), elastic
// membership (generations), recovery of lost shards from checkpoints, data
// chunk leases and job progress. No gRPC types: shards are driven through
// ShardControl.
//
// This class holds the one lock and plans under it; it owns the parts that
// know one thing each (leveldb's DBImpl over VersionSet is the model):
//   MemberRegistry  workers and shards, leases, ids, adoption after restart
//   Job / ChunkTable  each job's phase, membership, chunk leases, ledger
//   placement.h     which shards serve a job (pure functions)
//   round.h         a generation round, run without the lock
//   job_status_view.h  the status a user sees (a pure function)
//   Journal         durable state, fsync'd without the lock (group commit)
// Calls to shards (InitJob, rounds, EndJob) run on the executor, never under
// the lock and never in the ticker: one slow shard delays only its own job.
// Each plans under the lock, calls out without it, then commits under it.
//
// Thread safety: every public method is safe to call concurrently.
// Background work (lease expiry, scheduling) runs in Tick(), called by the
// thread Start() owns, or directly by tests.
#ifndef FULCRUM_SERVER_COORDINATOR_COORDINATOR_CORE_H_
#define FULCRUM_SERVER_COORDINATOR_COORDINATOR_CORE_H_

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/concurrency/executor.h"
#include "common/env/env.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "fulcrum/v1/parameter_server.pb.h"
#include "server/coordinator/job.h"
#include "server/coordinator/journal.h"
#include "server/coordinator/member_registry.h"
#include "server/coordinator/round.h"
#include "server/coordinator/shard_control.h"

namespace fulcrum {

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
    // Not owned: the clock (leases) and the state files.
    Env* env = Env::Default();
    // Not owned: where calls to shards run. Null: a pool of
    // `shard_call_threads` threads of the coordinator's own.
    Executor* executor = nullptr;
    int shard_call_threads = 4;
    // Called (outside the lock) when a lease expires; role is "worker" or
    // "shard". May be null.
    std::function<void(const std::string& role)> on_member_lost;
    // Durable state (journal.h); empty: none, a restart forgets jobs.
    std::string state_dir;
    // The workers' --data_root and the shards' --checkpoint_root: a spec
    // whose dataset.dir or checkpoint.dir leads out of them is refused at
    // submit (lexically; the workers and shards also check links). Empty:
    // not checked (tests).
    std::string data_root;
    std::string checkpoint_root;
    // Ended jobs kept (status, export); older ones are forgotten, oldest
    // first, so the job table does not grow without bound.
    int keep_ended_jobs = 1000;
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
  // Expires leases, starts pending jobs, offers places, plans rounds; the
  // calls to shards go to the executor.
  void Tick();
  // The coordinator did not run for `stalled` (the ticker woke that much
  // later than asked: a paused process or VM): it could hear no heartbeat
  // meanwhile, so every member's lease is extended by that much instead of
  // running out at the next Tick(). The ticker calls it; tests may.
  void Resumed(absl::Duration stalled);

  // The user-facing calls.
  absl::StatusOr<std::string> SubmitJob(v1::JobSpec spec);
  absl::StatusOr<v1::JobStatus> GetJob(const std::string& job_id) const;
  // Every job's full status (metrics, tests).
  std::vector<v1::JobStatus> ListJobs() const;
  // A page of summaries (ListJobsRequest); INVALID_ARGUMENT naming
  // page_size or page_token.
  absl::StatusOr<v1::ListJobsResponse> ListJobs(
      const v1::ListJobsRequest& request) const;
  absl::StatusOr<v1::JobStatus> CancelJob(const std::string& job_id);
  std::vector<v1::Member> ListMembers() const;
  // The job's parameters for `fulcrumctl export` (the CLI reaches shards
  // only through here): `sink` gets the spec, then every chunk pulled from
  // the job's shards; false from it stops the export (CANCELLED).
  // NOT_FOUND for an unknown job, FAILED_PRECONDITION while it has no
  // shards. Whether the shards agree on one version is the reader's check.
  absl::Status ExportJob(
      const std::string& job_id,
      const std::function<bool(const v1::ExportChunk&)>& sink);

  // The members' calls.
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
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
  absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest& request);
  // An external model's tensors from a worker registered for its job: the
  // first declaration becomes the job's (INVALID_ARGUMENT naming the bad
  // field; nothing changes), a later one must match it
  // (FAILED_PRECONDITION naming the first tensor that differs).
  absl::StatusOr<v1::DeclareModelResponse> DeclareModel(
      const v1::DeclareModelRequest& request);

 private:
  // Work planned under the lock, run after it: shard calls and journal
  // syncs.
  struct Effects {
    std::vector<std::function<void()>> tasks;  // for the executor
    std::vector<std::string> lost_roles;
    std::vector<std::pair<std::string, std::string>> ends;  // address, job
    uint64_t journal_ticket = 0;
  };
  // Runs `e` (no lock held): tasks and EndJob calls on the executor, the
  // journal's sync, the lost-member callbacks.
  void Apply(Effects& e);

  // Tick's parts. REQUIRES: mu_.
  void ExpireLeases(absl::Time now, Effects* e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetEndedJobs(Effects* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJobs(absl::Time now, Effects* e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OfferPlaces(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlanRounds(absl::Time now, Effects* e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyForRound(Job& job, absl::Time now, Effects* e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReplaceLostShards(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RoundPlan PlanRound(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, ShardUse> ShardLoad() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Work on the executor, committing under the lock.
  void Launch(std::string job_id,
              std::vector<std::pair<std::string, v1::InitJobRequest>> inits);
  void CommitLaunch(const std::string& job_id, const absl::Status& status);
  void RunRoundTask(RoundPlan plan);
  void CommitRound(const RoundPlan& plan, const RoundResult& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbandonRound(const RoundPlan& plan, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Job changes. REQUIRES: mu_.
  void Finish(Job& job, v1::JobState state, const std::string& message,
              Effects* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker left the job (left, lost or failed): out of the wanted
  // membership, its chunk lease returns to the queue.
  void DropMember(Job& job, const std::string& worker, const std::string& kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseShard(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddEvent(Job& job, const std::string& kind, const std::string& member,
                int64_t step = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Job* FindJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Member calls' parts. REQUIRES: mu_.
  WorkerMember* AdoptOrFind(const v1::WorkerHeartbeatRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakePrepared(WorkerMember& w, const v1::WorkerHeartbeatRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Rejoin(WorkerMember& w, const std::string& reported_job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A "finished" event for `worker`, once per job.
  void AddFinished(Job& job, const std::string& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A shard whose lease ran out while it was alive is heard from again: it
  // takes back its place in each job that has not replaced it yet, and a
  // job whose lost shards all came back needs no restore.
  void ShardBack(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::WorkerHeartbeatResponse AssignmentOf(WorkerMember& w,
                                           const std::string& reported_job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // wire.pre_reduce: the members (in rank order) registered with w's
  // hostname, when two or more.
  void AddHostGroup(const WorkerMember& w,
                    const google::protobuf::RepeatedPtrField<std::string>&
                        members,
                    v1::WorkerAssignment* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeShardStats(const std::string& shard_id,
                      const v1::ShardJobStats& stats, Effects* e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndByReport(Job& job, WorkerMember& w,
                   const v1::ReportProgressRequest& request, Effects* e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker other than `except` joins `job` or may (offered, or idle and
  // fitting): a failed last member leaves the job to it.
  // A shard refused an update that would have made values non-finite: an
  // event naming the worker, and the job fails if its spec says so.
  // How long a round waits for a job's other lapsed members once one came
  // back: three heartbeats, at least 3 s. Members whose link healed at once
  // come back up to a reconnection backoff (kReconnectMaxMs, jittered) plus a
  // heartbeat cycle apart; the wait costs nothing when all of them are back.
  absl::Duration RejoinWait() const {
    return std::max(absl::Seconds(3), 3 * options_.heartbeat_interval);
  }
  // A member not heard from for this long has likely gone the way of one
  // that just lapsed: two heartbeats, at least 2 s.
  absl::Duration SilentAfter() const {
    return std::max(absl::Seconds(2), 2 * options_.heartbeat_interval);
  }
  // The heartbeat interval and the lease a registration answers with.
  template <typename Response>
  void SetTimings(Response* r) const {
    r->set_heartbeat_interval_ms(
        absl::ToInt64Milliseconds(options_.heartbeat_interval));
    r->set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  }
  absl::StatusOr<v1::ShardHeartbeatResponse> ShardBeat(
      const v1::ShardHeartbeatRequest& request, Effects* e);
  void TakeNonFinite(Job& job, const std::string& shard_id,
                     const v1::NonFiniteUpdates& n, Effects* e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Joinable(const Job& job, const std::string& except) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Durable state: queues a job's current state (and a snapshot when due).
  // Returns the journal ticket (0: no journal).
  uint64_t Persist(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t PersistCounters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t PersistForgotten(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (no lock) until `ticket` is durable; logs a failure.
  absl::Status Sync(uint64_t ticket);

  const Options options_;
  ShardControl* const shards_;  // Not owned.
  std::unique_ptr<ThreadPool> own_executor_;
  Executor* executor_;  // Not owned (or own_executor_).
  std::thread ticker_;
  absl::Notification stop_;

  mutable absl::Mutex mu_;
  int64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> job_order_ ABSL_GUARDED_BY(mu_);  // submitted
  MemberRegistry members_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Journal> journal_;  // set by Recover, before Start
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_COORDINATOR_CORE_H_
