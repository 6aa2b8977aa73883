// The receiving half every ParameterChannel shares: which elements of each
// partition's next version have arrived, the clock and stop flag of the
// partitions that are whole, the channel's first error, and the waits on
// them.
//
// Thread safety: every method is safe to call concurrently, except that
// WaitForClock is called by one thread at a time (it keeps scratch state).
#ifndef FULCRUM_COMMON_DATAPLANE_ARRIVALS_H_
#define FULCRUM_COMMON_DATAPLANE_ARRIVALS_H_

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

  // Waits until every partition arrived once; returns their common clock
  // (FAILED_PRECONDITION when shards disagree).
  absl::StatusOr<int64_t> WaitForAll(absl::Time deadline);
  // See ParameterChannel::WaitForClock.
  absl::Status WaitForClock(int64_t clock, absl::Time deadline, bool* stop,
                            absl::FunctionRef<void(int32_t)> arrived);
  absl::Status error() const;

 private:
  const ParameterLayout* const layout_;  // Not owned.
  mutable absl::Mutex mu_;
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
