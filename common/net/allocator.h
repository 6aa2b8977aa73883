// Process-wide allocator settings for processes that move large messages.
#ifndef FULCRUM_COMMON_NET_ALLOCATOR_H_
#define FULCRUM_COMMON_NET_ALLOCATOR_H_

namespace fulcrum {

// glibc serves allocations above 128 KiB with a fresh mmap and returns them
// with munmap. gRPC allocates a buffer per received tensor chunk, so every
// step paid page faults on first touch and TLB-shootdown IPIs on unmap
// (measured with perf: ~40% of the shards' CPU on the reference job). Raising
// the mmap and trim thresholds keeps those buffers in the heap and reuses
// them. Also turns off Abseil's mutex deadlock detector, which Debian's build
// leaves on. Call first thing in main, before any thread starts.
void TuneAllocatorForLargeMessages();

// The same for a library in someone else's process (the C API, that is
// PyTorch workers): once, the first time it is called, unless
// $FULCRUM_TUNE_ALLOCATOR is 0, false or off. Safe with threads running
// (mallopt takes the allocator's lock). Without it a TCP worker spent a
// third of its CPU time in madvise and page faults (bench/exchange's
// driver, perf). Thread-safe.
void TuneAllocatorInLibrary();

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_ALLOCATOR_H_
