#include "common/net/allocator.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// Page faults per step of a receiving thread's pattern (what gRPC does with
// a step's messages): 16 buffers of 1 MiB allocated, written and freed,
// averaged over 10 steps after 10 to settle.
long FaultsPerStep() {
  long per_step = 0;
  std::thread t([&] {
    const auto faults = [] {
      rusage u;
      getrusage(RUSAGE_THREAD, &u);
      return u.ru_minflt;
    };
    std::vector<char*> buffers;
    long total = 0;
    for (int step = 0; step < 20; ++step) {
      const long before = faults();
      for (int i = 0; i < 16; ++i) {
        char* p = static_cast<char*>(std::malloc(1 << 20));
        std::memset(p, step, 1 << 20);
        buffers.push_back(p);
      }
      for (char* p : buffers) std::free(p);
      buffers.clear();
      if (step >= 10) total += faults() - before;
    }
    per_step = total / 10;
  });
  t.join();
  return per_step;
}

TEST(AllocatorTest, OptingOutLeavesGlibcsDefaults) {
  // In a child, so that the tuning below is not done yet: glibc's defaults
  // return the freed megabytes to the kernel and fault them back in every
  // step (16 MiB / 4 KiB = 4096 faults) - what the tuning is for.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv("FULCRUM_TUNE_ALLOCATOR", "0", 1);
    TuneAllocatorInLibrary();
    _exit(FaultsPerStep() > 1000 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "with FULCRUM_TUNE_ALLOCATOR=0 a step should fault its buffers in";
}

TEST(AllocatorTest, TunedBuffersStayInTheHeap) {
  TuneAllocatorInLibrary();
  TuneAllocatorInLibrary();  // once is enough; a second call changes nothing
  EXPECT_LT(FaultsPerStep(), 64);
}

}  // namespace
}  // namespace fulcrum
