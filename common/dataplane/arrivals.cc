#include "common/dataplane/arrivals.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fulcrum {

Arrivals::Arrivals(const ParameterLayout* layout)
    : layout_(layout),
      clock_(layout->partitions().size(), -1),
      received_(layout->partitions().size(), 0),
      stop_(layout->partitions().size(), 0),
      handed_(layout->partitions().size(), 0) {
  ready_.reserve(layout->partitions().size());
}

void Arrivals::Received(int32_t partition, int64_t count, int64_t clock,
                        bool stop) {
  absl::MutexLock lock(&mu_);
  received_[partition] += count;
  if (received_[partition] < layout_->partitions()[partition].size) return;
  received_[partition] = 0;
  clock_[partition] = clock;
  stop_[partition] = stop;
  changed_.SignalAll();
}

void Arrivals::Restart(const std::vector<int32_t>& partitions) {
  absl::MutexLock lock(&mu_);
  for (int32_t id : partitions) received_[id] = 0;
}

void Arrivals::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = status;
  changed_.SignalAll();
}

void Arrivals::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  changed_.SignalAll();
}

absl::Status Arrivals::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::StatusOr<int64_t> Arrivals::WaitForAll(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (!error_.ok()) return error_;
    if (cancelled_) return absl::CancelledError("cancelled");
    const auto [lo, hi] = std::minmax_element(clock_.begin(), clock_.end());
    if (lo != clock_.end() && *lo >= 0) {
      if (*lo != *hi) {
        return absl::FailedPreconditionError(absl::StrCat(
            "shards disagree on the starting clock (", *lo, " vs ", *hi, ")"));
      }
      return *lo;
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          "timed out waiting for initial parameters");
    }
  }
}

absl::Status Arrivals::WaitForClock(int64_t clock, absl::Time deadline,
                                    bool* stop,
                                    absl::FunctionRef<void(int32_t)> arrived) {
  const int32_t parts = static_cast<int32_t>(handed_.size());
  std::fill(handed_.begin(), handed_.end(), 0);
  int32_t handed = 0;
  while (handed < parts) {
    ready_.clear();
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (!error_.ok()) return error_;
        if (cancelled_) return absl::CancelledError("cancelled");
        for (int32_t id = 0; id < parts; ++id) {
          if (!handed_[id] && clock_[id] >= clock) ready_.push_back(id);
        }
        if (!ready_.empty()) break;
        if (changed_.WaitWithDeadline(&mu_, deadline)) {
          return absl::DeadlineExceededError(absl::StrCat(
              "timed out waiting for the parameters of step ", clock));
        }
      }
    }
    for (int32_t id : ready_) {
      handed_[id] = 1;
      ++handed;
      arrived(id);
    }
  }
  absl::MutexLock lock(&mu_);
  *stop = std::any_of(stop_.begin(), stop_.end(), [](uint8_t s) { return s; });
  return absl::OkStatus();
}

}  // namespace fulcrum
