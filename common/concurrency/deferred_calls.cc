#include "common/concurrency/deferred_calls.h"

#include <atomic>
#include <cstdint>
#include <utility>

#include "common/concurrency/executor.h"

namespace fulcrum {
namespace {

thread_local DeferredCalls* outermost = nullptr;
std::atomic<int64_t> unscoped_calls{0};

Executor& Background() {
  // Leaked: a call deferred during exit must still find it.
  static ThreadPool* pool = [] {
    auto* p = new ThreadPool(1);
    p->Start();
    return p;
  }();
  return *pool;
}

}  // namespace

DeferredCalls::DeferredCalls() : outermost_(outermost == nullptr) {
  if (outermost_) outermost = this;
}

DeferredCalls::~DeferredCalls() {
  if (!outermost_) return;
  // A call may defer more (a continuation that changes state): run until
  // none is left, still as the outermost scope.
  for (size_t i = 0; i < calls_.size(); ++i) {
    std::function<void()> call = std::move(calls_[i]);
    call();
  }
  outermost = nullptr;
}

void DeferredCalls::Defer(std::function<void()> call) {
  if (outermost != nullptr) {
    outermost->calls_.push_back(std::move(call));
    return;
  }
  unscoped_calls.fetch_add(1, std::memory_order_relaxed);
  Background().Schedule(std::move(call));
}

int64_t DeferredCalls::unscoped() {
  return unscoped_calls.load(std::memory_order_relaxed);
}

}  // namespace fulcrum
