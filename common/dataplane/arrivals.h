// The receiving half every ParameterChannel shares: which elements of each
// partition's next version have arrived, the clock and stop flag of the
// partitions that are whole, the channel's first error, and the waits on
// them.
//
// A wait may be given a Pump: the waiting thread then reads arrivals
// itself (a channel whose training thread reads its shared-memory rings)
// instead of sleeping until another thread calls Received.
//
// Thread safety: every method is safe to call concurrently, except that
// WaitForClock is called by one thread at a time (it keeps scratch state).
#ifndef FULCRUM_COMMON_DATAPLANE_ARRIVALS_H_
#define FULCRUM_COMMON_DATAPLANE_ARRIVALS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor/layout.h"

namespace fulcrum {

class Arrivals {
 public:
  // What a waiter may do instead of sleeping, called without the lock with
  // the wait's clock (WaitForAll: 0, any version) and deadline: read and
  // apply what arrived (calling Received), waiting for it at most until
  // the deadline. true: it read or tried - the wait checks again and calls
  // it again; false: it has nothing to read, and the wait sleeps until
  // Received, Fail, Cancel or Poke.
  using Pump = absl::FunctionRef<bool(int64_t clock, absl::Time deadline)>;

  // `layout` is not owned and must outlive this.
  explicit Arrivals(const ParameterLayout* layout);

  // `count` elements of `partition` arrived (the caller wrote them into the
  // parameter buffer); once the partition is whole its clock and stop flag
  // are those of this last run.
  void Received(int32_t partition, int64_t count, int64_t clock, bool stop);
  // The partitions' half-received versions are forgotten (a connection
  // broke: the shard sends them again).
  void Restart(const std::vector<int32_t>& partitions);
  // The channel failed: every wait returns `status` (the first one kept).
  void Fail(const absl::Status& status);
  void Cancel();
  // Something a Pump reads from changed (a connection's rings became
  // readable): a sleeping wait asks its pump again.
  void Poke();
  // Failed or cancelled (a pump's reads stop waiting); no lock.
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  // Whether some partition in `ids` is not yet whole at `clock` or later.
  bool Outstanding(const std::vector<int32_t>& ids, int64_t clock) const;

  // The pump of a wait that only sleeps.
  static bool NoPump(int64_t, absl::Time) { return false; }

  // Waits until every partition arrived once; returns their common clock
  // (FAILED_PRECONDITION when shards disagree).
  absl::StatusOr<int64_t> WaitForAll(absl::Time deadline,
                                     Pump pump = NoPump);
  // See ParameterChannel::WaitForClock.
  absl::Status WaitForClock(int64_t clock, absl::Time deadline, bool* stop,
                            absl::FunctionRef<void(int32_t)> arrived,
                            Pump pump = NoPump);
  absl::Status error() const;

 private:
  // Until a partition is ready (the caller's `ready`, checked under the
  // lock after the channel's error and cancellation), the deadline, or a
  // failure; sleeps or pumps in between.
  absl::Status Await(absl::FunctionRef<bool()> ready, int64_t clock,
                     absl::Time deadline, Pump pump,
                     absl::FunctionRef<absl::Status()> too_late)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ParameterLayout* const layout_;  // Not owned.
  mutable absl::Mutex mu_;
  // Every change a wait may be waiting for: Received (whole), Fail,
  // Cancel, Poke. A pumping wait sleeps only if none came since it looked.
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stopped_{false};
  absl::CondVar changed_;
  std::vector<int64_t> clock_ ABSL_GUARDED_BY(mu_);     // -1: never whole
  std::vector<int64_t> received_ ABSL_GUARDED_BY(mu_);  // of the next one
  std::vector<uint8_t> stop_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // WaitForClock's scratch: partitions handed to `arrived` / ready.
  std::vector<uint8_t> handed_;
  std::vector<int32_t> ready_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_ARRIVALS_H_
