#include "common/dataplane/arrivals.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

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
  ++changes_;
  changed_.SignalAll();
}

void Arrivals::Restart(const std::vector<int32_t>& partitions) {
  absl::MutexLock lock(&mu_);
  for (int32_t id : partitions) received_[id] = 0;
}

void Arrivals::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = status;
  stopped_.store(true, std::memory_order_release);
  ++changes_;
  changed_.SignalAll();
}

void Arrivals::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  stopped_.store(true, std::memory_order_release);
  ++changes_;
  changed_.SignalAll();
}

void Arrivals::Poke() {
  absl::MutexLock lock(&mu_);
  ++changes_;
  changed_.SignalAll();
}

bool Arrivals::Outstanding(const std::vector<int32_t>& ids,
                           int64_t clock) const {
  absl::MutexLock lock(&mu_);
  for (int32_t id : ids) {
    if (clock_[id] < clock) return true;  // -1 (never whole) < any clock
  }
  return false;
}

absl::Status Arrivals::Await(absl::FunctionRef<bool()> ready, int64_t clock,
                             absl::Time deadline, Pump pump,
                             absl::FunctionRef<absl::Status()> too_late) {
  for (;;) {
    if (!error_.ok()) return error_;
    if (cancelled_) return absl::CancelledError("cancelled");
    if (ready()) return absl::OkStatus();
    if (absl::Now() < deadline) {
      const uint64_t seen = changes_;
      mu_.Unlock();
      const bool pumped = pump(clock, deadline);
      mu_.Lock();
      // A change the pump did not see (a Poke while it found nothing)
      // must not be slept through.
      if (pumped || changes_ != seen) continue;
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) return too_late();
  }
}

absl::Status Arrivals::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

absl::StatusOr<int64_t> Arrivals::WaitForAll(absl::Time deadline, Pump pump) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Await(
      [this] {
        return *std::min_element(clock_.begin(), clock_.end()) >= 0;
      },
      0, deadline, pump, [] {
        return absl::DeadlineExceededError(
            "timed out waiting for initial parameters");
      }));
  const auto [lo, hi] = std::minmax_element(clock_.begin(), clock_.end());
  if (*lo != *hi) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shards disagree on the starting clock (", *lo, " vs ", *hi, ")"));
  }
  return *lo;
}

absl::Status Arrivals::WaitForClock(int64_t clock, absl::Time deadline,
                                    bool* stop,
                                    absl::FunctionRef<void(int32_t)> arrived,
                                    Pump pump) {
  const int32_t parts = static_cast<int32_t>(handed_.size());
  std::fill(handed_.begin(), handed_.end(), 0);
  int32_t handed = 0;
  while (handed < parts) {
    ready_.clear();
    {
      absl::MutexLock lock(&mu_);
      RETURN_IF_ERROR(Await(
          [&] {
            for (int32_t id = 0; id < parts; ++id) {
              if (!handed_[id] && clock_[id] >= clock) ready_.push_back(id);
            }
            return !ready_.empty();
          },
          clock, deadline, pump, [clock] {
            return absl::DeadlineExceededError(absl::StrCat(
                "timed out waiting for the parameters of step ", clock));
          }));
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
