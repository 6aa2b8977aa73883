// Per-worker clocks of one job on one shard, the read bound of the
// consistency modes, and the staleness of every read.
//
// A member's clock is the number of steps it has finished on this shard
// (pushed every partition held here). A read at clock c (the member wants
// parameters to compute step c) is served when every member still training
// has clock >= c - bound; its staleness is c minus the smallest such clock.
// sync reads come after the barrier (staleness 0); ssp(s) waits with
// bound s; async does not wait (unbounded).
//
// Thread safety: all methods are safe to call concurrently. A method that
// changes clocks runs the OnRead callbacks it decides after releasing the
// table's lock (deferred_calls.h), on its own thread.
#ifndef FULCRUM_SERVER_PS_CLOCKS_H_
#define FULCRUM_SERVER_PS_CLOCKS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/concurrency/wait_list.h"

namespace fulcrum {

struct StalenessStats {
  static constexpr int kBuckets = 64;  // staleness 0..62, and >= 63
  std::vector<int64_t> counts = std::vector<int64_t>(kBuckets, 0);
  int64_t reads = 0;
  int64_t sum = 0;
  int64_t max = 0;
};

class ClockTable {
 public:
  ClockTable(int members, int partitions_here, int64_t generation = 1);

  // A membership change: `members` members, all at `clock`, of `generation`.
  // Waits of older generations end with ABORTED; calls that name an older
  // generation are ignored. Statistics are kept.
  void Reset(int members, int64_t clock, int64_t generation);

  // `member` finished one of this shard's partitions for `step`. Returns
  // true when that completed the step (the member's clock is now step + 1).
  // generation < 0: the current one.
  bool PartitionDone(int member, int64_t step, int64_t generation = -1);
  int64_t Clock(int member) const;
  int64_t MinClock() const;  // INT64_MAX when no member trains
  int64_t MaxClock() const;

  // The member stopped training (its stream closed): reads stop waiting for
  // it. A finished member still counts towards ActiveMembers().
  void Finish(int member, int64_t generation = -1);
  // The member left the job: not waited for and not counted.
  void Remove(int member);
  int ActiveMembers() const;

  // Waits until every member still training has clock >= c - bound (a
  // negative bound: no wait), then records the read's staleness and returns
  // it. DEADLINE_EXCEEDED, CANCELLED (`cancelled()` true) or ABORTED (End(),
  // or the table was Reset past `generation`) otherwise.
  absl::StatusOr<int64_t> WaitForRead(int64_t c, int64_t bound,
                                      absl::Time deadline,
                                      const std::function<bool()>& cancelled,
                                      int64_t generation = -1);
  // WaitForRead without blocking (the callback stream service): the
  // outcome when decided now (`done` is not called); otherwise `done` runs
  // once with it, on the thread whose change decided it, unless
  // CancelRead(*id) returns true first. No deadline: the caller keeps one.
  std::optional<absl::StatusOr<int64_t>> OnRead(
      int64_t c, int64_t bound, int64_t generation,
      std::function<void(absl::StatusOr<int64_t>)> done, uint64_t* id);
  // True when the read was still waiting (its callback never runs).
  bool CancelRead(uint64_t id);
  StalenessStats Stats() const;
  void End();

 private:
  int64_t MinClockLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A read's outcome now (recording its staleness), nullopt: it waits.
  std::optional<absl::StatusOr<int64_t>> ReadOutcome(int64_t c, int64_t bound,
                                                     int64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes the blocked reads and decides the waiting ones.
  void Changed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    changed_.SignalAll();
    waits_.Changed();
  }
  bool Stale(int64_t generation) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return generation >= 0 && generation != generation_;
  }

  const int partitions_here_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  WaitList<absl::StatusOr<int64_t>> waits_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> clock_ ABSL_GUARDED_BY(mu_);
  std::vector<int> parts_done_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> finished_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> removed_ ABSL_GUARDED_BY(mu_);
  StalenessStats stats_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  int64_t generation_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_CLOCKS_H_
