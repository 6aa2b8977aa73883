// Where a shard's embedding rows are cut for checkpoints (embeddings.md,
// Checkpoints). Rows apply on arrival, so checkpoint N must be assembled:
//   - every member's row pushes of the steps before N must have arrived
//     before the copy (a worker pushes a step's rows after the dense
//     gradient's last chunk, so the dense partitions may complete step N-1
//     first): each member's row clock per table, and WaitForRows;
//   - in sync jobs no push of step >= N may be in it: the cuts open for
//     pushes (ForPush gives the window the row stores image under,
//     row_cuts.h), the writer copies cut N (OpenForCopy ... Copied).
// ssp and async jobs take the rows as they are at the copy, later steps'
// included, as their dense partitions do (exact: false).
//
// At most kMaxOpenCuts cuts are open: when pushes run further ahead of a
// writer that has not copied the oldest, that cut is dropped (its images
// freed) and its file is not written (OpenForCopy says why).
//
// A table no member has pushed to is not waited for (a PyTorch job that
// never uses a declared table still checkpoints).
//
// Thread safety: every method is safe to call concurrently.
#ifndef FULCRUM_SERVER_PS_EMBEDDING_CHECKPOINT_CUTS_H_
#define FULCRUM_SERVER_PS_EMBEDDING_CHECKPOINT_CUTS_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/ps/embedding/row_cuts.h"

namespace fulcrum {

class CheckpointCuts {
 public:
  static constexpr int kMaxOpenCuts = 3;

  // `every`: checkpoint.every_steps (0: no checkpoints, nothing opens);
  // `exact`: a sync job (cuts at the step); `tables` of the job.
  CheckpointCuts(int64_t every, bool exact, int tables, int members,
                 int64_t generation);

  // A push of `step` to `table` arrived: the cuts open for it (those up
  // to `step` open now). Empty when not exact or step < 0.
  CutWindow ForPush(int table, int64_t step);
  // `member` of `generation` pushed every chunk of `table` for `step`.
  // True when the member's row clock (steps pushed to every table in use)
  // moved.
  bool Done(int table, int member, int64_t step, int64_t generation);
  // The smallest row clock of the members (INT64_MAX: none, or no table
  // in use).
  int64_t MinClock() const;

  // The writer, for the file of `step`: waits until every member's row
  // clock reached `step` (each in-use table), the generation changes, End,
  // or `timeout`; DEADLINE_EXCEEDED / ABORTED say which rows are missing.
  absl::Status WaitForRows(int64_t step, absl::Duration timeout) const;
  // Opens cut `step` for the copy; returns it (-1: not exact - copy the
  // rows as they are), or FAILED_PRECONDITION when the cut was dropped.
  absl::StatusOr<int64_t> OpenForCopy(int64_t step);
  // The copy of `step` is done: cuts <= step close.
  void Copied(int64_t step);

  // Membership: `members` of `generation`, every clock at `clock`; waits
  // for older generations end.
  void Reset(int members, int64_t clock, int64_t generation);
  // The rows were restored to `step` (0: cleared): cuts after it belong to
  // a discarded history.
  void Restored(int64_t step);
  void End();

 private:
  CutWindow WindowLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OpenLocked(int64_t cut) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t MinClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t every_;
  const bool exact_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar changed_;
  // Cuts: open are the multiples of every_ in (lo_, hi_].
  int64_t lo_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hi_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_through_ ABSL_GUARDED_BY(mu_) = -1;
  // Row clocks: clock_[table][member], steps pushed in full.
  int64_t generation_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<int64_t>> clock_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> used_ ABSL_GUARDED_BY(mu_);  // by table
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_CHECKPOINT_CUTS_H_
