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

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_ALLOCATOR_H_
