// Where background work runs: a small pool of threads in a process, the
// caller's own thread in tests that want every effect to have happened when
// the call returns (as leveldb's Env::Schedule is replaced in its tests).
//
// Thread safety: Schedule is safe to call concurrently.
#ifndef FULCRUM_COMMON_CONCURRENCY_EXECUTOR_H_
#define FULCRUM_COMMON_CONCURRENCY_EXECUTOR_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fulcrum {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `task` some time later (or now, inline).
  virtual void Schedule(std::function<void()> task) = 0;
};

// Runs each task at once on the calling thread.
class InlineExecutor : public Executor {
 public:
  void Schedule(std::function<void()> task) override { task(); }
};

// `threads` threads, started in Start() and joined in Stop(), which first
// runs every task already scheduled. Tasks scheduled after Stop() run
// inline.
class ThreadPool : public Executor {
 public:
  explicit ThreadPool(int threads) : size_(threads) {}
  ~ThreadPool() override { Stop(); }
  void Start();
  void Stop();
  void Schedule(std::function<void()> task) override;
  // Tasks queued or running (tests, metrics).
  int pending() const;

 private:
  void Run();

  const int size_;
  std::vector<std::thread> threads_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONCURRENCY_EXECUTOR_H_
