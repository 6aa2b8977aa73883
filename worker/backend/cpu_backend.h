// Backend on the host CPU: OpenBLAS sgemm plus plain loops for the
// elementwise kernels.
#ifndef FULCRUM_WORKER_BACKEND_CPU_BACKEND_H_
#define FULCRUM_WORKER_BACKEND_CPU_BACKEND_H_

#include "worker/backend/backend.h"

namespace fulcrum {

class CpuBackend final : public Backend {
 public:
  // `threads` for OpenBLAS (process-wide setting); 1 leaves the other cores
  // to the communication threads and to the other processes of a host.
  explicit CpuBackend(int threads = 1);

  std::string Name() const override { return "cpu"; }
  bool HostAccessible() const override { return true; }
  float* Allocate(int64_t n) override;
  void Free(float* p) override;
  void CopyToDevice(const float* host, float* device, int64_t n) override;
  void CopyToHost(const float* device, float* host, int64_t n) override;
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
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_BACKEND_CPU_BACKEND_H_
