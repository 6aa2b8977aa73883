#include "server/ps/embedding/checkpoint_cuts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fulcrum {

CheckpointCuts::CheckpointCuts(int64_t every, bool exact, int tables,
                               int members, int64_t generation)
    : every_(every),
      exact_(exact && every > 0),
      generation_(generation),
      clock_(tables, std::vector<int64_t>(members, 0)),
      used_(tables, 0) {}

CutWindow CheckpointCuts::WindowLocked() const {
  return CutWindow{every_, std::max(lo_, dropped_through_), hi_};
}

void CheckpointCuts::OpenLocked(int64_t cut) {
  if (cut <= hi_) return;
  hi_ = cut;
  // Too far ahead of the copies: the oldest open cuts go.
  const int64_t floor = hi_ - kMaxOpenCuts * every_;
  if (std::max(lo_, dropped_through_) < floor) dropped_through_ = floor;
}

CutWindow CheckpointCuts::ForPush(int table, int64_t step) {
  absl::MutexLock lock(&mu_);
  if (table >= 0 && table < static_cast<int>(used_.size())) used_[table] = 1;
  if (!exact_ || step < 0) return CutWindow{};
  OpenLocked(step / every_ * every_);
  return WindowLocked();
}

bool CheckpointCuts::Done(int table, int member, int64_t step,
                          int64_t generation) {
  absl::MutexLock lock(&mu_);
  if (generation != generation_ || table < 0 ||
      table >= static_cast<int>(clock_.size()) || member < 0 ||
      member >= static_cast<int>(clock_[table].size())) {
    return false;
  }
  used_[table] = 1;
  const int64_t before = MinClockLocked();
  clock_[table][member] = std::max(clock_[table][member], step + 1);
  changed_.SignalAll();
  return MinClockLocked() != before;
}

int64_t CheckpointCuts::MinClockLocked() const {
  int64_t lo = INT64_MAX;
  for (size_t t = 0; t < clock_.size(); ++t) {
    if (!used_[t]) continue;
    for (int64_t c : clock_[t]) lo = std::min(lo, c);
  }
  return lo;
}

int64_t CheckpointCuts::MinClock() const {
  absl::MutexLock lock(&mu_);
  return MinClockLocked();
}

absl::Status CheckpointCuts::WaitForRows(int64_t step,
                                         absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  const int64_t generation = generation_;
  while (MinClockLocked() < step) {
    if (ended_) return absl::AbortedError("the job ended");
    if (generation_ != generation) {
      return absl::AbortedError(absl::StrCat(
          "generation ", generation, " was replaced by ", generation_));
    }
    if (changed_.WaitWithDeadline(&mu_, deadline) &&
        MinClockLocked() < step) {
      for (size_t t = 0; t < clock_.size(); ++t) {
        if (!used_[t]) continue;
        for (size_t m = 0; m < clock_[t].size(); ++m) {
          if (clock_[t][m] < step) {
            return absl::DeadlineExceededError(absl::StrCat(
                "after ", absl::FormatDuration(timeout), " member ", m,
                " has pushed table ", t, "'s rows up to step ",
                clock_[t][m] - 1, " of the ", step, " before the cut"));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CheckpointCuts::OpenForCopy(int64_t step) {
  absl::MutexLock lock(&mu_);
  if (!exact_) return -1;
  if (step <= dropped_through_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the embedding rows' cut of step ", step,
        " was dropped: pushes ran more than ", kMaxOpenCuts,
        " checkpoints ahead of the writer (checkpoint.every_steps ", every_,
        "); a later checkpoint follows"));
  }
  OpenLocked(step);
  return step;
}

void CheckpointCuts::Copied(int64_t step) {
  absl::MutexLock lock(&mu_);
  lo_ = std::max(lo_, step);
  hi_ = std::max(hi_, lo_);
}

void CheckpointCuts::Reset(int members, int64_t clock, int64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
  for (auto& c : clock_) c.assign(members, clock);
  changed_.SignalAll();
}

void CheckpointCuts::Restored(int64_t step) {
  absl::MutexLock lock(&mu_);
  lo_ = hi_ = step;
  dropped_through_ = -1;
}

void CheckpointCuts::End() {
  absl::MutexLock lock(&mu_);
  ended_ = true;
  changed_.SignalAll();
}

}  // namespace fulcrum
