// A test backend that behaves like a discrete GPU, on the CPU: its memory is
// separate from host memory (HostAccessible() is false, so the trainer takes
// its device path: staging copies, asynchronous gradient buckets and
// per-partition parameter copies), and asynchronous copies land as late as
// a GPU may let them:
//   - CopyToHostAsync reads the device memory when it is issued (the copy
//     stream runs once compute reached that point) but writes `host` only in
//     WaitCopy: a caller that reads `host` earlier sees stale values;
//   - CopyToDeviceAsync reads `host` and writes `device` only in
//     ComputeWaitsForCopies (or Synchronize): a kernel that should have
//     waited for the parameters computes with the old ones.
// It also checks the ordering rules a real device does not check: a kernel
// or copy touching memory that an unfinished copy to the device writes, or
// writing memory that an unwaited copy to the host reads, is a race; the
// first one becomes status() (and the trainer fails with it).
// Kernels are CpuBackend's, so results are comparable bit for bit.
//
// Thread safety: one thread at a time, like every Backend.
#ifndef FULCRUM_WORKER_TESTING_SIMULATED_DEVICE_BACKEND_H_
#define FULCRUM_WORKER_TESTING_SIMULATED_DEVICE_BACKEND_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "worker/backend/cpu_backend.h"

namespace fulcrum {

class SimulatedDeviceBackend final : public Backend {
 public:
  SimulatedDeviceBackend() = default;
  ~SimulatedDeviceBackend() override;

  std::string Name() const override { return "simulated-device"; }
  float* Allocate(int64_t n) override;
  void Free(float* p) override;
  void CopyToDevice(const float* host, float* device, int64_t n) override;
  void CopyToHost(const float* device, float* host, int64_t n) override;
  void Synchronize() override;
  absl::Status status() const override { return status_; }
  int CopyToHostAsync(const float* device, float* host, int64_t n) override;
  void WaitCopy(int ticket) override;
  void CopyToDeviceAsync(const float* host, float* device, int64_t n) override;
  void ComputeWaitsForCopies() override;

  void GemmStrided(bool trans_a, bool trans_b, int m, int n, int k,
                   float alpha, const float* a, int lda, const float* b,
                   int ldb, float beta, float* c, int ldc) override;
  void AddBias(int rows, int cols, const float* bias, float* x) override;
  void BiasGrad(int rows, int cols, const float* dy, float* db) override;
  void Relu(int64_t n, float* x) override;
  void ReluGrad(int64_t n, const float* y, float* dy) override;
  double SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                             const int32_t* labels, float scale,
                             float* dlogits) override;
  int64_t CountCorrect(int rows, int cols, const float* logits,
                       const int32_t* labels) override;
  int32_t* AllocateIndices(int64_t n) override;
  void FreeIndices(int32_t* p) override;
  void CopyIndicesToDevice(const int32_t* host, int32_t* device,
                           int64_t n) override;
  void SegmentSum(int segments, int dim, const int32_t* offsets,
                  const int32_t* index, const float* src,
                  float* out) override;
  double SigmoidCrossEntropy(int n, const float* logits, const float* labels,
                             float scale, float* dlogits) override;
  void PairDots(int batch, int n, int dim, const float* rows,
                const float* last, float* out) override;
  void PairDotsGrad(int batch, int n, int dim, const float* rows,
                    const float* last, const float* dout, float* d_rows,
                    float* d_last) override;

  // Copies issued so far, by direction (tests assert the path was taken).
  int64_t async_to_host() const { return async_to_host_; }
  int64_t async_to_device() const { return async_to_device_; }

 private:
  struct ToHost {  // issued, not yet waited for
    int ticket;
    const float* device;
    float* host;
    std::vector<float> data;  // the device values when it was issued
  };
  struct ToDevice {  // issued, not yet landed
    const float* host;
    float* device;
    int64_t n;
  };
  // Device memory a kernel or copy reads / writes: checked against the
  // copies in flight.
  void Reads(const float* p, int64_t n, const char* what);
  void Writes(const float* p, int64_t n, const char* what);
  void Race(const std::string& what);

  CpuBackend cpu_;
  std::map<float*, std::unique_ptr<float[]>> memory_;
  std::map<int32_t*, std::unique_ptr<int32_t[]>> index_memory_;
  std::vector<ToHost> to_host_;
  std::vector<ToDevice> to_device_;
  int next_ticket_ = 0;
  int64_t async_to_host_ = 0;
  int64_t async_to_device_ = 0;
  absl::Status status_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_TESTING_SIMULATED_DEVICE_BACKEND_H_
