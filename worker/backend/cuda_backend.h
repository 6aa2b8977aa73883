// Backend on one NVIDIA GPU: device memory (cudaMalloc, no managed memory),
// cuBLAS GEMMs (fp32, or TF32 tensor cores when asked), the kernels of
// cuda_kernels.cu, one stream for compute and one for copies, page-locked
// host staging. CUDA and cuBLAS errors become an absl::Status: Create()
// returns them; later ones are kept (status()) and the worker fails the
// step with them.
//
// Thread safety: one training thread at a time, like every Backend.
#ifndef FULCRUM_WORKER_BACKEND_CUDA_BACKEND_H_
#define FULCRUM_WORKER_BACKEND_CUDA_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"

namespace fulcrum {

class CudaBackend final : public Backend {
 public:
  struct Options {
    int device = 0;
    // TF32 tensor-core GEMMs (10-bit mantissa products, fp32 accumulate):
    // faster, with relative errors around 1e-3 instead of 1e-6.
    bool tf32 = false;
  };
  // FAILED_PRECONDITION "no CUDA device" when there is none (or no driver);
  // INVALID_ARGUMENT for a device index out of range.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(Options options);
  // Devices visible to this process (0 without a driver).
  static int DeviceCount();
  ~CudaBackend() override;

  std::string Name() const override { return name_; }
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
  void RegisterHost(float* host, int64_t n) override;
  void UnregisterHost(float* host) override;

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

 private:
  struct Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl, std::string name);
  // Records the first failure; returns whether `ok`.
  bool Check(bool ok, const std::string& what);
  // The same for a status (its code kept).
  bool Check(const absl::Status& s);
  // Row-wise loss/accuracy into the host mirrors; false on a CUDA error.
  bool RunSoftmax(int rows, int cols, const float* logits,
                  const int32_t* labels, float scale, float* dlogits);

  std::unique_ptr<Impl> impl_;
  const std::string name_;
  absl::Status status_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_BACKEND_CUDA_BACKEND_H_
