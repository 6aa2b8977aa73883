// Waits that do not block a thread: a condition on state its owner guards
// with a lock, and a callback for the outcome. The owner calls Changed()
// under its lock wherever it would signal a condition variable; each wait
// then decided is removed and its callback deferred (deferred_calls.h) to
// run once the changing call has released its locks - on that thread, no
// hop to another. The callback stream service (stream_reactor.h) answers
// reads this way; blocking callers keep their condition variables.
//
// Thread safety: every method is called under the owner's lock, which
// also guards what `check` reads. A callback runs exactly once, unless
// Cancel(id) returns true first.
#ifndef FULCRUM_COMMON_CONCURRENCY_WAIT_LIST_H_
#define FULCRUM_COMMON_CONCURRENCY_WAIT_LIST_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "common/concurrency/deferred_calls.h"

namespace fulcrum {

template <typename R>
class WaitList {
 public:
  // The outcome once decided; nullopt: keep waiting. Runs under the
  // owner's lock: quick, no other lock of the owner.
  using Check = std::function<std::optional<R>()>;
  using Done = std::function<void(R)>;

  // A wait whose check said nullopt just now; its id for Cancel.
  uint64_t Add(Check check, Done done) {
    waits_.push_back({++last_id_, std::move(check), std::move(done)});
    return last_id_;
  }

  // Decides what it can: each decided wait leaves the list and its
  // callback is deferred with the outcome.
  void Changed() {
    size_t kept = 0;
    for (size_t i = 0; i < waits_.size(); ++i) {
      std::optional<R> outcome = waits_[i].check();
      if (!outcome) {
        if (kept != i) waits_[kept] = std::move(waits_[i]);
        ++kept;
        continue;
      }
      DeferredCalls::Defer(
          [done = std::move(waits_[i].done), r = std::move(*outcome)]() mutable {
            done(std::move(r));
          });
    }
    waits_.resize(kept);
  }

  // Removes the wait: true when it was still waiting (its callback will
  // never run); false when it was decided already (its callback runs or
  // ran).
  bool Cancel(uint64_t id) {
    for (size_t i = 0; i < waits_.size(); ++i) {
      if (waits_[i].id != id) continue;
      waits_.erase(waits_.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    }
    return false;
  }

  size_t size() const { return waits_.size(); }

 private:
  struct Wait {
    uint64_t id;
    Check check;
    Done done;
  };
  std::vector<Wait> waits_;
  uint64_t last_id_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONCURRENCY_WAIT_LIST_H_
