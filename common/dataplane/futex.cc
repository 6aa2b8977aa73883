#include "common/dataplane/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace fulcrum {

void FutexWait(const std::atomic<uint32_t>* word, uint32_t seen,
               absl::Duration max) {
  timespec ts = absl::ToTimespec(max);
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT,
          seen, &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  word->fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

}  // namespace fulcrum
