// Callbacks decided under a lock and run after every lock of the deciding
// call is released: a wait's continuation (the callback stream service's)
// reads partitions and writes to gRPC, which it must not do under the
// partition's lock that found it ready.
//
// The outermost DeferredCalls alive on a thread collects what Defer is
// given on that thread and runs it, in order, when it is destroyed - so an
// entry point constructs one before it takes any lock (JobShard's and
// ClockTable's public mutators do). Inner scopes add nothing of their own.
// Defer on a thread with no scope runs the call on a background thread
// (never under the caller's locks; only slower).
//
// Thread safety: a scope belongs to its thread; Defer is safe anywhere.
#ifndef FULCRUM_COMMON_CONCURRENCY_DEFERRED_CALLS_H_
#define FULCRUM_COMMON_CONCURRENCY_DEFERRED_CALLS_H_

#include <functional>
#include <vector>

namespace fulcrum {

class DeferredCalls {
 public:
  DeferredCalls();
  ~DeferredCalls();  // the outermost runs what was deferred
  DeferredCalls(const DeferredCalls&) = delete;
  DeferredCalls& operator=(const DeferredCalls&) = delete;

  static void Defer(std::function<void()> call);
  // Calls run on the background thread so far (tests: a missing scope).
  static int64_t unscoped();

 private:
  bool outermost_;
  std::vector<std::function<void()>> calls_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONCURRENCY_DEFERRED_CALLS_H_
