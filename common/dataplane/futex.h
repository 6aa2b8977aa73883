// Futex words shared between processes (in a shared-memory segment; not
// FUTEX_PRIVATE): the wake-ups of the host group's segment
// (group_segment.h) and of the stream rings (shm_ring.h).
//
// Usage: read the word, check the condition, then FutexWait with the value
// read - it returns at once if the word moved since (a FutexWake came in
// between), else sleeps at most `max` (every caller re-checks its
// deadlines and peers after that).
//
// Thread safety: any thread or process that maps the word.
#ifndef FULCRUM_COMMON_DATAPLANE_FUTEX_H_
#define FULCRUM_COMMON_DATAPLANE_FUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace fulcrum {

void FutexWait(const std::atomic<uint32_t>* word, uint32_t seen,
               absl::Duration max);
// FutexWait on several words at once (at most kMaxWaitAny): returns when
// any of them moved from its `seen` value, or after `max`. false: no
// futex_waitv here (before Linux 5.16, or refused by a seccomp filter) -
// nothing was waited for, and the next calls return false at once too.
inline constexpr int kMaxWaitAny = 16;
bool FutexWaitAny(absl::Span<const std::atomic<uint32_t>* const> words,
                  absl::Span<const uint32_t> seen, absl::Duration max);
// Moves the word (sequentially consistent) and wakes every waiter.
void FutexWake(std::atomic<uint32_t>* word);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_FUTEX_H_
