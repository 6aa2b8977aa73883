// The parameter shard's core: each job's partitions held by this shard, the
// per-step aggregation of worker pushes (weighted by `samples`), the
// server-side optimizer, and versioned reads. No gRPC types; the service in
// service.h translates.
//
// Consistency (architecture §4), per job:
// - sync (BSP), per partition: version v = updates applied. Pushes for step v
//   accumulate until every member of the generation has pushed all of its
//   chunks (or an empty push with samples = 0); the last push applies
//   sum(g_i n_i) / sum(n_i) and makes version v + 1 readable.
// - ssp(s) and async: each member's gradient for a partition is applied as
//   soon as all its chunks arrived, scaled by n_i / (batch_size * members),
//   so one step of every member moves the parameters as far as one sync
//   step. Reads are bounded by the ClockTable (clocks.h): ssp waits until
//   every member still training is within s clocks; async never waits.
//
// Thread safety: all methods are safe to call concurrently. Each partition
// has its own lock, so pushes to different partitions proceed in parallel.
#ifndef FULCRUM_SERVER_PS_SHARD_CORE_H_
#define FULCRUM_SERVER_PS_SHARD_CORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor/layout.h"
#include "fulcrum/v1/job.pb.h"
#include "server/ps/checkpoint.h"
#include "server/ps/clocks.h"
#include "server/ps/optimizer.h"

namespace fulcrum {

struct PushChunk {
  int64_t step = 0;
  int32_t partition = 0;
  int64_t offset = 0;   // elements from the partition start
  int64_t samples = 0;  // 0: this worker has no gradient for the step
  const char* data = nullptr;
  size_t bytes = 0;
  bool stop = false;
  int64_t generation = 1;  // of the pushing stream
  // Chunk sharding: the samples behind the gradient (chunk < 0: none).
  int64_t range_chunk = -1;
  int64_t range_begin = 0;
  int64_t range_end = 0;
};

// The data ledger's entry for one chunk (see v1.LedgerEntry).
struct LedgerEntry {
  int64_t end = 0;
  int64_t samples = 0;
  bool operator==(const LedgerEntry& o) const {
    return end == o.end && samples == o.samples;
  }
};
using Ledger = std::map<int64_t, LedgerEntry>;  // by chunk

// What a Push did.
enum class PushOutcome {
  kPartial,          // the member's contribution still misses chunks
  kCompleted,        // this push completed it
  kAlreadyComplete,  // a repeat: complete (or applied) before
};

// A Reconfigure's answer.
struct Reconfigured {
  int64_t min_version = 0;  // sync: partition versions; ssp/async: clocks
  int64_t max_version = 0;
  bool has_ledger = false;
  Ledger ledger;
};

struct JobInit {
  std::string job_id;
  v1::JobSpec spec;  // validated, defaults applied
  int shard_index = 0;
  int num_shards = 1;
  int64_t generation = 1;
  std::vector<std::string> workers;
  // Called after each checkpoint write attempt (not part of the job's
  // identity: InitJob ignores it when comparing). May be null.
  std::function<void(int64_t step, double seconds, const absl::Status& status)>
      on_checkpoint;
};

// One job's partitions on this shard.
class JobShard {
 public:
  static absl::StatusOr<std::unique_ptr<JobShard>> Create(const JobInit& init);
  ~JobShard();

  const JobInit& init() const { return init_; }
  const ParameterLayout& layout() const { return layout_; }
  // Partition ids held here, ascending.
  const std::vector<int32_t>& partition_ids() const { return ids_; }
  int64_t chunk_elems() const { return chunk_elems_; }

  // Index of `worker_id` among the generation's members: PERMISSION_DENIED
  // if not a member, ABORTED on an older generation, UNAVAILABLE (retry) on
  // a newer one or while a reconfiguration is between its phases.
  absl::StatusOr<int> MemberIndex(const std::string& worker_id,
                                  int64_t generation) const;
  int64_t generation() const;
  std::vector<std::string> workers() const;

  // Applies one chunk from member `member` of chunk.generation. Repeats are
  // acknowledged and never applied twice. A rejected push (INVALID_ARGUMENT,
  // FAILED_PRECONDITION, ABORTED for an older generation) changes nothing.
  absl::StatusOr<PushOutcome> Push(int member, const PushChunk& chunk);

  // Blocks until `partition` reaches `version`, the job ends or `generation`
  // is replaced (ABORTED), `cancelled()` turns true (CANCELLED) or
  // `deadline` passes (DEADLINE_EXCEEDED).
  absl::Status WaitForVersion(int32_t partition, int64_t version,
                              int64_t generation, absl::Time deadline,
                              const std::function<bool()>& cancelled);

  // Membership change or recovery (see ParameterServer.Reconfigure).
  // Phase 1 (align_version < 0): adopts `generation` and `workers`, drops
  // half-aggregated steps, optionally restores checkpoint `restore_step`
  // (0: the initial parameters) first. Phase 2: brings every partition to
  // `align_version` (sync: undoing at most one step), resets the clocks to
  // it and serves the generation. FAILED_PRECONDITION when the generation is
  // older than the shard's or a partition cannot be aligned; NOT_FOUND or
  // DATA_LOSS when the checkpoint is missing or corrupt (nothing changed).
  absl::StatusOr<Reconfigured> Reconfigure(
      int64_t generation, const std::vector<std::string>& workers,
      int64_t align_version, bool restore, int64_t restore_step);

  // Copies elements [offset, offset + n) of `partition` with its version and
  // whether a worker asked to stop at that version.
  absl::Status Read(int32_t partition, int64_t offset, int64_t n, float* out,
                    int64_t* version, bool* stop);

  // Partition size in elements, or -1 when not held here.
  int64_t PartitionSize(int32_t partition) const;

  enum class Mode { kSync, kSsp, kAsync };
  Mode mode() const { return mode_; }
  // The read bound for ClockTable::WaitForRead: 0 (sync), s (ssp), -1 (async).
  int64_t read_bound() const;
  ClockTable& clocks() { return clocks_; }

  // The partition's whole state (values, optimizer state, version and the
  // optimizer's update count) as bytes, taken under the partition's lock, for
  // checkpoints. Format: see shard_core.cc (versioned, little-endian).
  absl::StatusOr<std::string> SavePartition(int32_t partition) const;
  // Replaces the partition's state with a SavePartition blob of the same
  // layout and optimizer, and drops any half-aggregated step. INVALID_ARGUMENT
  // or DATA_LOSS on a mismatched or truncated blob, which changes nothing.
  absl::Status RestorePartition(int32_t partition, std::string_view blob);

  // The newest step whose checkpoint this shard wrote, or -1.
  int64_t LastCheckpoint() const;
  // The data ledger, if partition 0 is held here.
  bool Ledger(fulcrum::Ledger* out) const;
  // Steps with a checkpoint file of this shard on disk, ascending.
  std::vector<int64_t> CheckpointSteps() const;

  // Stall inspector (sync): partitions whose current step has been waiting
  // longer than `threshold` since the first worker finished pushing it, and
  // the workers it still waits for.
  struct Stall {
    int32_t partition;
    int64_t step;
    double waited_seconds;
    std::vector<std::string> waiting_for;
  };
  std::vector<Stall> Stalls(absl::Duration threshold) const;

  // Wakes every waiter with ABORTED; later pushes fail; reads still work.
  void End();
  bool ended() const { return ended_.load(); }

 private:
  struct PartitionState;
  explicit JobShard(JobInit init, ParameterLayout layout);
  PartitionState* Find(int32_t partition) const;
  absl::Status Validate(const PartitionState& p, const PushChunk& c) const;
  absl::StatusOr<PushOutcome> PushSync(PartitionState& p, int member,
                                       const PushChunk& c);
  absl::StatusOr<PushOutcome> PushOnArrival(PartitionState& p, int member,
                                            const PushChunk& c);
  // SavePartition's blob. REQUIRES: p.mu held.
  std::string SaveLocked(const PartitionState& p) const;
  absl::Status RestoreLocked(PartitionState& p, std::string_view blob);
  // Clears the current step's aggregation for `members` members.
  // REQUIRES: p.mu held.
  void ResetStepLocked(PartitionState& p, int members) const;
  // Loads this shard's checkpoint of `step` into every partition (0: the
  // initial parameters). All or nothing.
  absl::Status RestoreCheckpoint(int64_t step);
  // ssp/async: checkpoint N is taken once every member's clock reached N (a
  // multiple of every_steps): each partition as it is then. Partitions are
  // not a consistent cut across each other (nor are ssp/async reads).
  void MaybeCheckpointByClock();

  const JobInit init_;
  const ParameterLayout layout_;
  const OptimizerConfig optimizer_;
  const int64_t chunk_elems_;
  std::vector<int32_t> ids_;
  std::vector<std::unique_ptr<PartitionState>>
      slots_;  // by partition id; null if not here
  std::atomic<bool> ended_{false};
  const Mode mode_;
  absl::Mutex reconfigure_mu_;  // one Reconfigure at a time
  mutable absl::Mutex members_mu_;
  int64_t generation_ ABSL_GUARDED_BY(members_mu_);
  std::vector<std::string> workers_ ABSL_GUARDED_BY(members_mu_);
  bool serving_ ABSL_GUARDED_BY(members_mu_) = true;
  ClockTable clocks_;
  // ssp/async: a worker asked to stop.
  std::atomic<bool> stop_requested_{false};
  // ssp/async: the newest clock checkpointed (or restored / aligned to).
  absl::Mutex clock_checkpoint_mu_;
  int64_t clock_checkpoint_ ABSL_GUARDED_BY(clock_checkpoint_mu_) = 0;
  // Last member: destroyed first, so queued checkpoint writes finish.
  std::unique_ptr<CheckpointWriter> checkpointer_;
};

// All jobs on this shard process.
class ParameterShard {
 public:
  static constexpr size_t kKeepEnded = 8;

  // Creates the job's partitions, or confirms an identical earlier InitJob.
  // FAILED_PRECONDITION if the job exists with another spec or placement.
  absl::StatusOr<std::shared_ptr<JobShard>> InitJob(const JobInit& init);
  // NOT_FOUND if unknown.
  absl::StatusOr<std::shared_ptr<JobShard>> Find(
      const std::string& job_id) const;
  // Ends the job's waits and pushes. Its parameters stay readable (Pull)
  // until ForgetJob, or until kKeepEnded later jobs have ended. Unknown or
  // already ended jobs are fine (idempotent).
  void EndJob(const std::string& job_id);
  void ForgetJob(const std::string& job_id);
  std::vector<std::string> JobIds() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<JobShard>> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ended_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_SHARD_CORE_H_
