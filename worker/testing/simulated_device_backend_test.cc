#include "worker/testing/simulated_device_backend.h"

#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(SimulatedDeviceBackendTest, CopyToHostAsyncLandsOnlyInWaitCopy) {
  SimulatedDeviceBackend b;
  EXPECT_FALSE(b.HostAccessible());
  float* d = b.Allocate(4);
  const std::vector<float> src = {1, 2, 3, 4};
  b.CopyToDevice(src.data(), d, 4);
  std::vector<float> host(4, 0.0f);
  const int ticket = b.CopyToHostAsync(d, host.data(), 4);
  EXPECT_EQ(host, std::vector<float>(4, 0.0f)) << "landed before WaitCopy";
  b.WaitCopy(ticket);
  EXPECT_EQ(host, src);
  EXPECT_TRUE(b.status().ok()) << b.status();
  b.Free(d);
}

TEST(SimulatedDeviceBackendTest, CopyToDeviceAsyncLandsWhenComputeWaits) {
  SimulatedDeviceBackend b;
  float* d = b.Allocate(2);
  const std::vector<float> zero = {0, 0};
  b.CopyToDevice(zero.data(), d, 2);
  const std::vector<float> src = {5, 6};
  b.CopyToDeviceAsync(src.data(), d, 2);
  std::vector<float> host(2, -1.0f);
  b.ComputeWaitsForCopies();
  b.CopyToHost(d, host.data(), 2);
  EXPECT_EQ(host, src);
  EXPECT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(b.async_to_device(), 1);
}

TEST(SimulatedDeviceBackendTest, KernelReadingAnUnfinishedCopyIsARace) {
  SimulatedDeviceBackend b;
  float* x = b.Allocate(4);
  const std::vector<float> src = {1, -2, 3, -4};
  b.CopyToDeviceAsync(src.data(), x, 4);
  b.Relu(4, x);  // forgot ComputeWaitsForCopies
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(b.status().message().find("Relu"), std::string::npos)
      << b.status();
}

TEST(SimulatedDeviceBackendTest, OverwritingMemoryBeingCopiedOutIsARace) {
  SimulatedDeviceBackend b;
  float* y = b.Allocate(2);
  float* dy = b.Allocate(2);
  const std::vector<float> ones = {1, 1};
  b.CopyToDevice(ones.data(), y, 2);
  b.CopyToDevice(ones.data(), dy, 2);
  std::vector<float> host(2);
  b.CopyToHostAsync(dy, host.data(), 2);
  b.ReluGrad(2, y, dy);  // writes dy while the copy may still read it
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(b.status().message().find("ReluGrad"), std::string::npos)
      << b.status();
}

TEST(SimulatedDeviceBackendTest, ReadingWhatIsBeingCopiedOutIsFine) {
  SimulatedDeviceBackend b;
  float* y = b.Allocate(3);
  float* dy = b.Allocate(3);
  const std::vector<float> v = {1, 0, 2};
  b.CopyToDevice(v.data(), y, 3);
  b.CopyToDevice(v.data(), dy, 3);
  std::vector<float> host(3);
  const int t = b.CopyToHostAsync(y, host.data(), 3);
  b.ReluGrad(3, y, dy);  // reads y only
  b.WaitCopy(t);
  EXPECT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(host, v);
}

TEST(SimulatedDeviceBackendTest, SynchronizeLandsEverything) {
  SimulatedDeviceBackend b;
  float* d = b.Allocate(1);
  const float one = 1, two = 2;
  b.CopyToDevice(&one, d, 1);
  float out = 0;
  const int t = b.CopyToHostAsync(d, &out, 1);
  b.CopyToDeviceAsync(&two, d, 1);
  b.Synchronize();
  EXPECT_EQ(out, 1.0f);
  b.WaitCopy(t);  // already landed: a no-op
  float now = 0;
  b.CopyToHost(d, &now, 1);
  EXPECT_EQ(now, 2.0f);
  EXPECT_TRUE(b.status().ok()) << b.status();
  b.WaitCopy(7);  // never issued
  EXPECT_FALSE(b.status().ok());
}

}  // namespace
}  // namespace fulcrum
