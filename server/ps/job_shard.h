// One job's partitions on one shard: membership by generation, pushes
// through the job's aggregation algorithm (aggregator.h), versioned reads,
// reconfiguration for membership changes and recovery, and checkpoints. No
// gRPC types: service.cc and the in-process channel drive it through
// WorkerStream (worker_stream.h).
//
// Consistency (architecture: Consistency): sync and ssp(0) run the barrier
// (version v = steps applied); ssp(s > 0) and async apply on arrival and
// bound reads with the ClockTable (clocks.h): ssp waits until every member
// still training is within s clocks, async never waits.
//
// Locks, in the order they may be taken: reconfigure_mu_ (one Reconfigure
// at a time), then members_mu_, then a partition's mu (several partitions
// are never locked at once), then the ClockTable's, then the
// CheckpointWriter's. Pushes take only their partition's lock (and the
// clocks' after it), so pushes to different partitions run in parallel.
//
// Thread safety: every public method is safe to call concurrently.
#ifndef FULCRUM_SERVER_PS_JOB_SHARD_H_
#define FULCRUM_SERVER_PS_JOB_SHARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/dataplane/payload.h"
#include "common/env/env.h"
#include "common/tensor/layout.h"
#include "fulcrum/v1/job.pb.h"
#include "server/ps/aggregator.h"
#include "server/ps/checkpoint.h"
#include "server/ps/clocks.h"
#include "server/ps/data_ledger.h"
#include "server/ps/embedding/embedding_tables.h"
#include "server/ps/partition_state.h"
#include "server/ps/push_tracker.h"

namespace fulcrum {

// An update refused because it would have made a value non-finite (NaN or
// infinite): the shard keeps the parameters as they were.
struct NonFiniteUpdate {
  int64_t count = 0;  // refused so far in this job on this shard
  int64_t step = -1;
  int32_t partition = -1;
  std::string worker_id;  // whose push held the largest |element|
  float largest = 0.0f;   // that element's magnitude
};

struct JobInit {
  std::string job_id;
  v1::JobSpec spec;  // validated, defaults applied
  int shard_index = 0;
  int num_shards = 1;
  int64_t generation = 1;
  std::vector<std::string> workers;
  // Where checkpoint files go: checkpoint.dir resolved under the shard's
  // --checkpoint_root (service.cc); empty: checkpoint.dir as it is (tests).
  // Not part of the job's identity.
  std::string checkpoint_dir;
  // Called after each checkpoint write attempt (not part of the job's
  // identity: InitJob ignores it when comparing). May be null.
  std::function<void(int64_t step, double seconds, const absl::Status& status)>
      on_checkpoint;
  // Called after an update was refused (see NonFiniteUpdate), outside any
  // lock. Not part of the job's identity either. May be null.
  std::function<void(const NonFiniteUpdate&)> on_nonfinite;
  Env* env = Env::Default();  // Not owned: clock and checkpoint files.
};

// Reconfigure phase 1's answer.
struct Adopted {
  // sync: the lowest partition version here; ssp/async: the lowest clock
  // (the restored step when restoring); -1 when no partition is held here.
  int64_t min_version = 0;
  std::vector<int64_t> checkpoint_steps;  // this shard's files on disk
  // When restoring: each embedding table's resident rows afterwards.
  std::vector<std::pair<std::string, int64_t>> restored_rows;
};

// Reconfigure phase 2's answer.
struct Aligned {
  bool has_ledger = false;  // partition 0 is held here
  Ledger ledger;
  bool initialized = true;  // the shard holds values (see Initialize)
};

class JobShard {
 public:
  enum class Mode { kSync, kSsp, kAsync };

  static absl::StatusOr<std::unique_ptr<JobShard>> Create(const JobInit& init);
  ~JobShard();

  const JobInit& init() const { return init_; }
  // Neither a partition nor an embedding table of the job is here (more
  // shards than partitions): nothing to checkpoint.
  bool CheckpointsNothing() const {
    return ids_.empty() && embeddings_->empty();
  }
  const ParameterLayout& layout() const { return layout_; }
  // Partition ids held here, ascending.
  const std::vector<int32_t>& partition_ids() const { return ids_; }
  int64_t chunk_elems() const { return chunk_elems_; }
  Mode mode() const { return mode_; }
  // The read bound for ClockTable::WaitForRead: 0 (sync), s (ssp), -1 (async).
  int64_t read_bound() const;
  ClockTable& clocks() { return clocks_; }

  // Index of `worker_id` among the generation's members: PERMISSION_DENIED
  // if not a member, ABORTED on an older generation, UNAVAILABLE (retry) on
  // a newer one or while a reconfiguration is between its phases.
  absl::StatusOr<int> MemberIndex(const std::string& worker_id,
                                  int64_t generation) const;
  int64_t generation() const;
  std::vector<std::string> workers() const;

  // Applies one chunk from `members` (one; or, pre-reduced, the members
  // chunk.shares are for, in that order) of chunk.generation. Repeats are
  // acknowledged and never applied twice. A rejected push (INVALID_ARGUMENT,
  // FAILED_PRECONDITION, ABORTED for an older generation or an ended job)
  // changes nothing. With checkpoints every K steps, a push of step t first
  // waits (at most kCheckpointWaitLimit) while this shard's file of a step
  // <= t - K is still on its way to disk: a crash costs at most 2K steps
  // (ssp: plus the staleness) however slow the disk.
  static constexpr absl::Duration kCheckpointWaitLimit = absl::Seconds(10);
  absl::StatusOr<PushOutcome> Push(absl::Span<const int> members,
                                   const PushChunk& chunk);
  absl::StatusOr<PushOutcome> Push(int member, const PushChunk& chunk) {
    return Push(absl::Span<const int>(&member, 1), chunk);
  }

  // Blocks until `partition` reaches `version`, the job ends or `generation`
  // is replaced (ABORTED), `cancelled()` turns true (CANCELLED) or
  // `deadline` passes (DEADLINE_EXCEEDED). Sync: when the step before
  // `version` was held back because its update would have made a value
  // non-finite, the member named for it (when among `members`, the waiting
  // stream's) gets INVALID_ARGUMENT saying so; the others wait for the
  // generation.
  absl::Status WaitForVersion(int32_t partition, int64_t version,
                              int64_t generation, absl::Time deadline,
                              const std::function<bool()>& cancelled,
                              absl::Span<const int> members = {});

  // WaitForVersion without blocking (the callback stream service): the
  // outcome when decided now (`done` is not called); otherwise `done` runs
  // once with it, on the thread whose change to the partition decided it
  // (after that thread released its locks), unless
  // CancelVersionWait(partition, *id) returns true first. No deadline or
  // cancellation of its own: the caller keeps those.
  std::optional<absl::Status> OnVersion(int32_t partition, int64_t version,
                                        int64_t generation,
                                        absl::Span<const int> members,
                                        std::function<void(absl::Status)> done,
                                        uint64_t* id);
  // True when the wait was still waiting (its callback never runs).
  bool CancelVersionWait(int32_t partition, uint64_t id);

  // Whether `partition` (held here) is at `version` or later now, in
  // `generation`: a WaitForVersion that would return at once.
  bool HasVersion(int32_t partition, int64_t version, int64_t generation);

  // Copies elements [offset, offset + n) of `partition` with its version and
  // whether a worker asked to stop at that version; into `out` in
  // `encoding` (n * ElementBytes(encoding) bytes: narrowed in the copy).
  absl::Status Read(int32_t partition, int64_t offset, int64_t n,
                    WireEncoding encoding, char* out, int64_t* version,
                    bool* stop);
  absl::Status Read(int32_t partition, int64_t offset, int64_t n, float* out,
                    int64_t* version, bool* stop) {
    return Read(partition, offset, n, WireEncoding::kFp32,
                reinterpret_cast<char*>(out), version, stop);
  }
  // Partition size in elements, or -1 when not held here.
  int64_t PartitionSize(int32_t partition) const;

  // Membership change or recovery (see ParameterServer.Reconfigure).
  // Phase 1: adopts `generation` and `workers` (waits, pushes and hellos of
  // older generations end with ABORTED), drops half-aggregated steps, first
  // restoring this shard's checkpoint of `restore_step` (0: the initial
  // parameters) if given. FAILED_PRECONDITION when the generation is older
  // than the shard's; NOT_FOUND or DATA_LOSS when the checkpoint is missing
  // or corrupt; nothing changes on an error.
  absl::StatusOr<Adopted> Adopt(int64_t generation,
                                const std::vector<std::string>& workers,
                                std::optional<int64_t> restore_step);
  // Phase 2: brings every partition to version `to` (sync: undoing at most
  // one step, and the embedding rows forget the pushes of steps >= `to`),
  // resets the clocks to it and serves the generation.
  // FAILED_PRECONDITION when `generation` is not the adopted one or a
  // partition cannot be aligned (nothing changes then).
  absl::StatusOr<Aligned> Align(int64_t generation,
                                const std::vector<std::string>& workers,
                                int64_t to);

  // The partition's whole state (partition_format.h) taken under its lock.
  absl::StatusOr<std::string> SavePartition(int32_t partition) const;
  // Replaces the partition's state with a SavePartition blob of the same
  // layout and optimizer and drops any half-aggregated step.
  // INVALID_ARGUMENT or DATA_LOSS on a mismatched or truncated blob, which
  // changes nothing.
  absl::Status RestorePartition(int32_t partition, std::string_view blob);

  // The updates refused so far (count 0: none) and the last one.
  NonFiniteUpdate LastNonFinite() const;

  // The newest step whose checkpoint this shard wrote, or -1.
  int64_t LastCheckpoint() const;
  // Steps with a checkpoint file of this shard on disk, ascending.
  std::vector<int64_t> CheckpointSteps() const;
  // Blocks until every checkpoint handed to the writer so far is written
  // (tests: "nothing more was written" without sleeping).
  void FlushCheckpoints();
  // The data ledger, if partition 0 is held here.
  bool Ledger(fulcrum::Ledger* out) const;

  // Stall inspector (sync): partitions whose current step has been waiting
  // longer than `threshold` since the first worker finished pushing it (by
  // the Env's clock), and the workers it still waits for.
  struct Stall {
    int32_t partition;
    int64_t step;
    double waited_seconds;
    std::vector<std::string> waiting_for;
  };
  std::vector<Stall> Stalls(absl::Duration threshold) const;

  // External models (model.type external) start without values: a member
  // uploads them (the coordinator names rank 0), chunk by chunk, and the
  // job serves nobody until every chunk of every partition held here has
  // arrived. In gradient-averaging mode (optimizer average) the shards hold
  // no weights between steps, so every new generation (Adopt) asks for
  // them again, and so does a restore of step 0. A chunk is checked like a
  // push (INVALID_ARGUMENT naming the field; PERMISSION_DENIED, ABORTED or
  // UNAVAILABLE for the member and generation); FAILED_PRECONDITION once
  // the shard holds values: they are never replaced.
  absl::Status Initialize(const std::string& worker_id, int64_t generation,
                          int32_t partition, int64_t offset, const char* data,
                          size_t bytes);
  bool initialized() const { return initialized_.load(); }

  // Embedding tables (docs/embeddings.md; job_shard_embeddings.cc): the
  // rows this shard holds. A member of the current generation pulls and
  // pushes rows (MemberIndex's errors first; a push to an ended job is
  // ABORTED), then EmbeddingTables checks and applies.
  const EmbeddingTables& embeddings() const { return *embeddings_; }
  // A table with a staleness bound makes a pull for `step` >= 0 wait (see
  // EmbeddingTables) until `deadline` or `cancelled()`.
  absl::Status PullRows(const std::string& worker_id, int64_t generation,
                        std::string_view table, absl::Span<const uint64_t> ids,
                        std::vector<float>* out, int64_t step = -1,
                        absl::Time deadline = absl::InfiniteFuture(),
                        const std::function<bool()>& cancelled = nullptr) const;
  absl::StatusOr<RowsPushed> PushRows(const std::string& worker_id,
                                      const RowsPush& push);
  // Evicts every row past its table's ttl (pushes expire a few as they go;
  // the shard's heartbeat calls this so idle tables shrink too).
  int64_t ExpireRows();

  // Wakes every waiter with ABORTED; later pushes fail; reads still work.
  void End();
  bool ended() const { return ended_.load(); }

 private:
  JobShard(JobInit init, ParameterLayout layout);
  PartitionState* Find(int32_t partition) const;
  // A read of `version` of `p` (partition `partition`), under p.mu: its
  // outcome now, nullopt while it waits (WaitForVersion's rules).
  std::optional<absl::Status> VersionOutcome(const PartitionState& p,
                                             int32_t partition,
                                             int64_t version,
                                             int64_t generation,
                                             absl::Span<const int> members)
      const;
  // Loads this shard's checkpoint of `step` into every partition (0: the
  // initial parameters). All or nothing.
  absl::Status RestoreCheckpoint(int64_t step);
  absl::Status RestoreInitial();
  // ssp/async: checkpoint N is taken once every member's clock reached N (a
  // multiple of every_steps): each partition as it is then. Partitions are
  // not a consistent cut across each other (nor are ssp/async reads).
  void MaybeCheckpointByClock();

  const JobInit init_;
  const ParameterLayout layout_;
  const OptimizerConfig optimizer_;
  const int64_t chunk_elems_;
  const Mode mode_;
  std::vector<int32_t> ids_;
  const std::string& checkpoint_dir() const {
    return init_.checkpoint_dir.empty() ? init_.spec.checkpoint().dir()
                                        : init_.checkpoint_dir;
  }
  std::vector<std::unique_ptr<PartitionState>>
      slots_;  // by partition id; null if not here
  std::atomic<bool> ended_{false};
  // Values held (false: an external model's are due from a member).
  std::atomic<bool> initialized_{true};
  std::atomic<int> complete_partitions_{0};  // uploaded whole
  // Forgets uploaded chunks: values are due again. REQUIRES: reconfigure_mu_
  // or construction.
  void AwaitValues();
  absl::Mutex reconfigure_mu_;
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
  mutable absl::Mutex nonfinite_mu_;
  NonFiniteUpdate nonfinite_ ABSL_GUARDED_BY(nonfinite_mu_);
  // Records a refused update of `partition` (called without p.mu).
  void NoteNonFinite(int32_t partition, const PartitionState::Rejected& r);
  std::unique_ptr<EmbeddingTables> embeddings_;
  // A shard with rows but no partition (and checkpoints): checkpoint N is
  // taken once every member's row clock (EmbeddingTables::RowClock)
  // reached N (clock_checkpoint_).
  bool rows_only_ = false;
  void MaybeCheckpointRows();
  // Push's back-pressure: waits for the files of steps <= step - K.
  void AwaitCheckpointsBehind(int64_t step);
  std::unique_ptr<CheckpointWriter> checkpointer_;
  // After checkpointer_: destroyed first, it points to it.
  std::unique_ptr<Aggregator> aggregator_;
};

// INVALID_ARGUMENT unless `workers` is non-empty with no repeats.
absl::Status CheckMembers(const std::vector<std::string>& workers);
// ABORTED: `have` is older than the job's generation `want`; re-join.
absl::Status StaleGeneration(const std::string& job_id, int64_t have,
                             int64_t want);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_JOB_SHARD_H_
