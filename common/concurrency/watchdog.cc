#include "common/concurrency/watchdog.h"

#include <utility>

#include "absl/time/clock.h"

namespace fulcrum {

Watchdog::Watchdog(absl::Duration tick)
    : tick_(tick), thread_([this] { Loop(); }) {}

Watchdog::~Watchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

uint64_t Watchdog::Arm(absl::Time deadline, std::function<void()> cancel) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_++;
  entries_[id] = Entry{deadline, nullptr, std::move(cancel), false};
  return id;
}

uint64_t Watchdog::Arm(const Deadline* deadline, std::function<void()> cancel) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_++;
  entries_[id] = Entry{absl::InfiniteFuture(), deadline, std::move(cancel), false};
  return id;
}

bool Watchdog::Rearm(uint64_t id, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.fired) return false;
  it->second.deadline = deadline;
  return true;
}

bool Watchdog::Disarm(uint64_t id) {
  absl::MutexLock lock(&mu_);  // waits for a cancel in progress
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  const bool fired = it->second.fired;
  entries_.erase(it);
  return fired;
}

size_t Watchdog::armed() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

void Watchdog::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), tick_);
    if (stop_) break;
    const absl::Time now = absl::Now();
    for (auto& [id, e] : entries_) {
      const absl::Time due = e.moving != nullptr ? e.moving->Get() : e.deadline;
      if (e.fired || now < due) continue;
      e.fired = true;
      e.cancel();
    }
  }
}

}  // namespace fulcrum
