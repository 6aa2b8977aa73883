#include "common/net/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "absl/synchronization/mutex.h"

namespace fulcrum {

void TuneAllocatorForLargeMessages() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);  // chunks are at most 4 MiB
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
  // Debian's Abseil runs the mutex deadlock detector (a graph update on every
  // lock of a new mutex); our lock order is fixed and tested, so skip it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

void TuneAllocatorInLibrary() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* v = std::getenv("FULCRUM_TUNE_ALLOCATOR");
    const std::string s = v == nullptr ? "" : v;
    if (s == "0" || s == "false" || s == "off") return;
    TuneAllocatorForLargeMessages();
  });
}

}  // namespace fulcrum
