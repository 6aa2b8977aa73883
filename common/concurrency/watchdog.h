// Deadlines on things that have none of their own: a blocking gRPC Read on
// a sync stream waits for the peer for ever, so the server arms a watchdog
// entry and the entry's cancel (ServerContext::TryCancel) ends the Read
// once the deadline passes. One thread for all entries.
//
// Thread safety: every method is safe to call concurrently. A cancel runs
// on the watchdog's thread under its lock: it must be quick and must not
// call back into the watchdog. Once Disarm(id) returns, that entry's
// cancel is not running and never will.
#ifndef FULCRUM_COMMON_CONCURRENCY_WATCHDOG_H_
#define FULCRUM_COMMON_CONCURRENCY_WATCHDOG_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fulcrum {

class Watchdog {
 public:
  explicit Watchdog(absl::Duration tick = absl::Milliseconds(50));
  ~Watchdog();  // fires nothing more

  // A deadline its owner moves without the watchdog's lock (one atomic
  // store: cheap enough for every message of a stream); the watchdog reads
  // it at each tick.
  class Deadline {
   public:
    explicit Deadline(absl::Time t) { Set(t); }
    void Set(absl::Time t) {
      ns_.store(absl::ToUnixNanos(t), std::memory_order_relaxed);
    }
    absl::Time Get() const {
      return absl::FromUnixNanos(ns_.load(std::memory_order_relaxed));
    }

   private:
    std::atomic<int64_t> ns_;
  };

  // Calls `cancel` once when `deadline` passes, unless disarmed first.
  uint64_t Arm(absl::Time deadline, std::function<void()> cancel);
  // The same for a deadline the caller moves (not owned: it must outlive
  // Disarm). Rearm does not apply to such an entry.
  uint64_t Arm(const Deadline* deadline, std::function<void()> cancel);
  // A new deadline for the entry (InfiniteFuture: none for now). False when
  // it fired already or is unknown.
  bool Rearm(uint64_t id, absl::Time deadline);
  // Forgets the entry. True if it had fired.
  bool Disarm(uint64_t id);
  size_t armed() const;

 private:
  struct Entry {
    absl::Time deadline;
    const Deadline* moving = nullptr;  // when set, it wins over `deadline`
    std::function<void()> cancel;
    bool fired = false;
  };
  void Loop();

  const absl::Duration tick_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONCURRENCY_WATCHDOG_H_
