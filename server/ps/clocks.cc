#include "server/ps/clocks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fulcrum {

ClockTable::ClockTable(int members, int partitions_here, int64_t generation)
    : partitions_here_(partitions_here),
      clock_(members, 0),
      parts_done_(members, 0),
      finished_(members, 0),
      removed_(members, 0),
      generation_(generation) {}

void ClockTable::Reset(int members, int64_t clock, int64_t generation) {
  DeferredCalls scope;  // before the lock: callbacks run after it
  absl::MutexLock lock(&mu_);
  clock_.assign(members, clock);
  parts_done_.assign(members, 0);
  finished_.assign(members, 0);
  removed_.assign(members, 0);
  generation_ = generation;
  Changed();
}

bool ClockTable::PartitionDone(int member, int64_t step, int64_t generation) {
  DeferredCalls scope;  // before the lock: callbacks run after it
  absl::MutexLock lock(&mu_);
  if (Stale(generation) || member >= static_cast<int>(clock_.size()))
    return false;
  if (step + 1 <= clock_[member]) return false;  // a repeat of a finished step
  if (++parts_done_[member] < partitions_here_) return false;
  parts_done_[member] = 0;
  clock_[member] = step + 1;
  Changed();
  return true;
}

int64_t ClockTable::Clock(int member) const {
  absl::MutexLock lock(&mu_);
  return member < static_cast<int>(clock_.size()) ? clock_[member] : 0;
}

int64_t ClockTable::MinClock() const {
  absl::MutexLock lock(&mu_);
  return MinClockLocked();
}

int64_t ClockTable::MaxClock() const {
  absl::MutexLock lock(&mu_);
  int64_t hi = 0;
  for (int64_t c : clock_) hi = std::max(hi, c);
  return hi;
}

void ClockTable::Finish(int member, int64_t generation) {
  DeferredCalls scope;  // before the lock: callbacks run after it
  absl::MutexLock lock(&mu_);
  if (Stale(generation) || member >= static_cast<int>(clock_.size())) return;
  finished_[member] = 1;
  Changed();
}

void ClockTable::Remove(int member) {
  DeferredCalls scope;  // before the lock: callbacks run after it
  absl::MutexLock lock(&mu_);
  if (member >= static_cast<int>(removed_.size())) return;
  removed_[member] = 1;
  Changed();
}

int ClockTable::ActiveMembers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(std::count(removed_.begin(), removed_.end(), 0));
}

int64_t ClockTable::MinClockLocked() const {
  int64_t lo = INT64_MAX;
  for (size_t m = 0; m < clock_.size(); ++m) {
    if (!finished_[m] && !removed_[m]) lo = std::min(lo, clock_[m]);
  }
  return lo;
}

std::optional<absl::StatusOr<int64_t>> ClockTable::ReadOutcome(
    int64_t c, int64_t bound, int64_t generation) {
  if (ended_) return absl::AbortedError("job ended");
  if (Stale(generation)) {
    return absl::AbortedError(absl::StrCat(
        "generation ", generation, " ended: the job is at generation ",
        generation_, "; re-join"));
  }
  const int64_t lo = MinClockLocked();
  if (bound >= 0 && lo < c - bound) return std::nullopt;
  const int64_t staleness = lo == INT64_MAX ? 0 : std::max<int64_t>(0, c - lo);
  stats_.counts[std::min<int64_t>(staleness, StalenessStats::kBuckets - 1)]++;
  stats_.reads++;
  stats_.sum += staleness;
  stats_.max = std::max(stats_.max, staleness);
  return staleness;
}

absl::StatusOr<int64_t> ClockTable::WaitForRead(
    int64_t c, int64_t bound, absl::Time deadline,
    const std::function<bool()>& cancelled, int64_t generation) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (std::optional<absl::StatusOr<int64_t>> r =
            ReadOutcome(c, bound, generation)) {
      return *std::move(r);
    }
    if (cancelled && cancelled())
      return absl::CancelledError("stream cancelled");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "read at clock ", c, " still waits for the slowest worker at clock ",
          MinClockLocked()));
    }
    changed_.WaitWithDeadline(
        &mu_, std::min(deadline, now + absl::Milliseconds(100)));
  }
}

std::optional<absl::StatusOr<int64_t>> ClockTable::OnRead(
    int64_t c, int64_t bound, int64_t generation,
    std::function<void(absl::StatusOr<int64_t>)> done, uint64_t* id) {
  absl::MutexLock lock(&mu_);
  if (std::optional<absl::StatusOr<int64_t>> r =
          ReadOutcome(c, bound, generation)) {
    return r;
  }
  *id = waits_.Add(
      [this, c, bound, generation] {
        mu_.AssertHeld();
        return ReadOutcome(c, bound, generation);
      },
      std::move(done));
  return std::nullopt;
}

bool ClockTable::CancelRead(uint64_t id) {
  absl::MutexLock lock(&mu_);
  return waits_.Cancel(id);
}

StalenessStats ClockTable::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void ClockTable::End() {
  DeferredCalls scope;  // before the lock: callbacks run after it
  absl::MutexLock lock(&mu_);
  ended_ = true;
  Changed();
}

}  // namespace fulcrum
