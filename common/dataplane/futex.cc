#include "common/dataplane/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace fulcrum {

void FutexWait(const std::atomic<uint32_t>* word, uint32_t seen,
               absl::Duration max) {
  timespec ts = absl::ToTimespec(max);
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT,
          seen, &ts, nullptr, 0);
}

bool FutexWaitAny(absl::Span<const std::atomic<uint32_t>* const> words,
                  absl::Span<const uint32_t> seen, absl::Duration max) {
#ifdef SYS_futex_waitv
  static std::atomic<bool> missing{false};
  if (missing.load(std::memory_order_relaxed) || words.size() > kMaxWaitAny ||
      words.size() != seen.size()) {
    return false;
  }
  futex_waitv waiters[kMaxWaitAny] = {};
  for (size_t i = 0; i < words.size(); ++i) {
    waiters[i].val = seen[i];
    waiters[i].uaddr = reinterpret_cast<uintptr_t>(words[i]);
    waiters[i].flags = FUTEX_32;  // shared between processes: not private
  }
  // futex_waitv's timeout is absolute.
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const timespec until =
      absl::ToTimespec(absl::DurationFromTimespec(now) + max);
  if (syscall(SYS_futex_waitv, waiters, words.size(), 0, &until,
              CLOCK_MONOTONIC) < 0 &&
      errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR) {
    // ENOSYS (an older kernel), EPERM (a seccomp filter that does not know
    // it): never again - a caller looping on an instant error would spin.
    missing.store(true, std::memory_order_relaxed);
    return false;
  }
  return true;
#else
  (void)words;
  (void)seen;
  (void)max;
  return false;
#endif
}

void FutexWake(std::atomic<uint32_t>* word) {
  word->fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

}  // namespace fulcrum
