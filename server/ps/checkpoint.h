// Checkpoint files: one per (job, step, shard), holding that shard's
// partitions as JobShard::SavePartition blobs.
//
// Layout under the job's checkpoint.dir:  <job_id>/step-<N>/shard-<i>.ckpt
// File: a fixed header (magic "FCK1", format version, step, shard, number
// of partitions, CRC-32C of the payload, job id length), the job id, then
// per partition: id (int32), blob length (uint64), blob. Little-endian.
// Written to a temp file, fsync'd, renamed into place, directory fsync'd:
// a reader sees a whole file or none.
#ifndef FULCRUM_SERVER_PS_CHECKPOINT_H_
#define FULCRUM_SERVER_PS_CHECKPOINT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env/env.h"

namespace fulcrum {

struct CheckpointFile {
  std::string job_id;
  int64_t step = 0;
  int32_t shard = 0;
  std::vector<std::pair<int32_t, std::string>> partitions;  // id, blob
};

std::string CheckpointPath(const std::string& dir, const std::string& job_id,
                           int64_t step, int32_t shard);

// Creates the directories as needed; atomic (WriteFileAtomically). Errors
// are the Env's (INTERNAL or NOT_FOUND, naming the path), never UNAVAILABLE.
absl::Status WriteCheckpoint(Env* env, const std::string& path,
                             const CheckpointFile& file);

// NOT_FOUND if missing; DATA_LOSS if truncated, not a checkpoint, or the
// CRC does not match.
absl::StatusOr<CheckpointFile> ReadCheckpoint(Env* env,
                                              const std::string& path);

// Steps that have a file of this shard, ascending.
std::vector<int64_t> ListCheckpointSteps(Env* env, const std::string& dir,
                                         const std::string& job_id,
                                         int32_t shard);

// A file that needs another step's file too (the embedding tables'
// differential needs their full save) says so in a sidecar beside it,
// `shard-<i>.needs` (the step, in decimal): pruning keeps what kept files
// need, across restarts of the shard.
std::string NeedsPath(const std::string& dir, const std::string& job_id,
                      int64_t step, int32_t shard);
// The step the file of `step` needs (its sidecar), or -1.
int64_t CheckpointNeeds(Env* env, const std::string& dir,
                        const std::string& job_id, int64_t step,
                        int32_t shard);

// Deletes this shard's files (and sidecars) in all but the newest `keep`
// step directories of the job - and the steps kept files need - and step
// directories left empty. Returns the steps kept, newest first.
std::vector<int64_t> PruneCheckpoints(Env* env, const std::string& dir,
                                      const std::string& job_id, int32_t shard,
                                      int keep);

// Collects one shard's partition snapshots per step and, once every
// partition held here has reported that step, writes the file from its own
// thread (off the gradient hot path), then prunes to the newest `keep`.
// At most kMaxQueued complete files wait for the thread: when the disk is
// slower than the steps, the oldest waiting one is dropped (reported to
// on_written as RESOURCE_EXHAUSTED; the newer ones are written), so the
// copies held in memory stay bounded.
//
// Thread safety: Add() and the accessors are safe to call concurrently.
class CheckpointWriter {
 public:
  static constexpr size_t kMaxQueued = 4;
  struct Options {
    std::string dir;
    std::string job_id;
    int32_t shard = 0;
    int partitions_here = 0;
    int keep = 3;
    // Called from the writer thread after each attempt. May be null.
    std::function<void(int64_t step, double seconds,
                       const absl::Status& status)>
        on_written;
    Env* env = Env::Default();  // Not owned.
    // More blobs for each file (the embedding tables' rows, keyed < 0),
    // taken on the writer thread just before the file of `step` is
    // written, and the step whose file they need besides (a differential's
    // full save; -1 or `step`: none). May be null.
    // `skip` not ok: the file of `step` is not written (on_written gets
    // the status; no more_written call).
    struct More {
      std::vector<std::pair<int32_t, std::string>> blobs;
      int64_t needs = -1;
      absl::Status skip;
    };
    std::function<More(int64_t step)> more;
    // Called on the writer thread after each attempt to write a file with
    // more's blobs. May be null.
    std::function<void(int64_t step, bool ok)> more_written;
  };

  explicit CheckpointWriter(Options options);
  // Writes what is complete, then joins the thread.
  ~CheckpointWriter();

  // `blob` is the partition's SavePartition state at `step`.
  // A partition added twice for a step replaces its first blob.
  void Add(int64_t step, int32_t partition, std::string blob);
  // A shard holding no partition (only embedding rows: partitions_here is
  // 0) has nothing to Add: its file of `step`, more's blobs alone, is
  // written when it says so. Ignored for a step written or queued already.
  void Complete(int64_t step);
  // Forgets pending and written checkpoints of steps after `step` (the job
  // was rolled back to it: they belong to a discarded history).
  void DropAfter(int64_t step);
  // Blocks until every complete step added so far is written (or failed).
  void Flush();
  // Blocks while a complete file of a step <= `step` waits for the disk
  // or is being written, at most `limit`. True once none does (written,
  // failed, dropped or rolled back: an attempt that failed is not waited
  // for again); false if `limit` passed first - and then those files are
  // not waited for again either (the caller that saw false says so; a
  // disk stalled longer than `limit` throttles each file once, not every
  // push). One atomic load when no file that old is pending.
  bool AwaitFilesThrough(int64_t step, absl::Duration limit);
  const Options& options() const { return options_; }
  int64_t last_written() const;  // -1 before the first successful write

 private:
  void Run();

  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<int64_t, CheckpointFile> collecting_ ABSL_GUARDED_BY(mu_);
  std::deque<CheckpointFile> ready_ ABSL_GUARDED_BY(mu_);
  // Queues a complete file, dropping the oldest waiting past kMaxQueued.
  void EnqueueLocked(CheckpointFile file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets oldest_pending_ from ready_, writing_ and awaited_after_.
  void NotePendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int64_t> overflowed_ ABSL_GUARDED_BY(mu_);  // to report
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_written_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t writing_ ABSL_GUARDED_BY(mu_) = -1;  // step being written, if any
  bool busy_ ABSL_GUARDED_BY(mu_) = false;     // a file is being written
  // Files of steps <= this are not waited for (AwaitFilesThrough gave up).
  int64_t given_up_through_ ABSL_GUARDED_BY(mu_) = -1;
  // The oldest step past given_up_through_ queued or being written
  // (INT64_MAX: none); written under mu_, read without it.
  std::atomic<int64_t> oldest_pending_{INT64_MAX};
  std::thread thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_CHECKPOINT_H_
