// The compute interface a model runs on. Pointers passed to kernels are in
// the backend's memory space (host memory for CpuBackend, device memory for
// a GPU backend); Allocate / CopyToDevice / CopyToHost move data across.
// Matrices are row-major.
//
// Thread safety: a Backend is used by one training thread at a time.
#ifndef FULCRUM_WORKER_BACKEND_BACKEND_H_
#define FULCRUM_WORKER_BACKEND_BACKEND_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace fulcrum {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;

  // Memory of n floats in this backend's space. When it cannot be had:
  // null, and status() turns RESOURCE_EXHAUSTED (sticky), so callers check
  // status() once after allocating, before any kernel uses the memory.
  virtual float* Allocate(int64_t n) = 0;
  virtual void Free(float* p) = 0;
  virtual void CopyToDevice(const float* host, float* device, int64_t n) = 0;
  virtual void CopyToHost(const float* device, float* host, int64_t n) = 0;
  // True when backend memory is host memory: the worker then trains directly
  // on the buffers the data plane fills, with no staging copies.
  virtual bool HostAccessible() const { return false; }
  // Waits until queued work is done (no-op on the CPU).
  virtual void Synchronize() {}
  // The first error the backend hit (a failed kernel launch, an out-of-memory
  // device), sticky; OK on the CPU.
  virtual absl::Status status() const { return absl::OkStatus(); }

  // Overlapping copies (a GPU backend copies on its own stream while compute
  // continues): CopyToHostAsync starts copying what queued compute produced
  // and returns a ticket; WaitCopy(ticket) returns once `host` holds it. The
  // CPU backend copies at once.
  virtual int CopyToHostAsync(const float* device, float* host, int64_t n) {
    CopyToHost(device, host, n);
    return 0;
  }
  virtual void WaitCopy(int ticket) {}
  // The other direction, for parameters arriving partition by partition:
  // CopyToDeviceAsync starts copying `host` into `device` once the compute
  // queued so far is done (it may still be reading `device`), on the copy
  // stream; `host` must stay unchanged until ComputeWaitsForCopies().
  // ComputeWaitsForCopies makes compute queued after it start only once
  // every async copy to the device queued before it has landed, without
  // blocking the calling thread. The CPU backend copies at once.
  virtual void CopyToDeviceAsync(const float* host, float* device, int64_t n) {
    CopyToDevice(host, device, n);
  }
  virtual void ComputeWaitsForCopies() {}
  // Page-locks host memory the backend copies to and from (no-op on the
  // CPU), so that copies run asynchronously at full bandwidth.
  virtual void RegisterHost(float* host, int64_t n) {}
  virtual void UnregisterHost(float* host) {}

  // c[m x n] = alpha * op(a) * op(b) + beta * c, op(x) = x or x^T, on
  // sub-matrices: lda, ldb and ldc are the row strides of a, b and c as
  // stored (a is stored k x m when transposed), so that a block of rows or
  // columns of a larger matrix is computed in place.
  virtual void GemmStrided(bool trans_a, bool trans_b, int m, int n, int k,
                           float alpha, const float* a, int lda,
                           const float* b, int ldb, float beta, float* c,
                           int ldc) = 0;
  // The same on whole (densely stored) matrices.
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
            const float* a, const float* b, float beta, float* c) {
    GemmStrided(trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b,
                trans_b ? k : n, beta, c, n);
  }
  // x[r][c] += bias[c] for a rows x cols matrix.
  virtual void AddBias(int rows, int cols, const float* bias, float* x) = 0;
  // db[c] = sum_r dy[r][c].
  virtual void BiasGrad(int rows, int cols, const float* dy, float* db) = 0;
  // x = max(x, 0) in place.
  virtual void Relu(int64_t n, float* x) = 0;
  // dy[i] = 0 where y[i] <= 0 (y is the ReLU output).
  virtual void ReluGrad(int64_t n, const float* y, float* dy) = 0;
  // Softmax cross-entropy over rows of logits: returns the summed loss over
  // the rows and writes dlogits = (softmax - onehot(label)) * scale.
  // `labels` is host memory.
  virtual double SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                     const int32_t* labels, float scale,
                                     float* dlogits) = 0;
  // Number of rows whose arg-max equals the label. `labels` is host memory.
  virtual int64_t CountCorrect(int rows, int cols, const float* logits,
                               const int32_t* labels) = 0;

  // ---- Embedding bags (worker/model/embedding_mlp.h) ----
  // Index memory: n int32 in this backend's space, with Allocate's contract
  // (null and a sticky RESOURCE_EXHAUSTED when it cannot be had).
  virtual int32_t* AllocateIndices(int64_t n) = 0;
  virtual void FreeIndices(int32_t* p) = 0;
  // Ordered with compute, like CopyToDevice.
  virtual void CopyIndicesToDevice(const int32_t* host, int32_t* device,
                                   int64_t n) = 0;
  // Segmented gather-sum over rows of `dim` floats: for s < segments,
  //   out[s][:] = sum over j in [offsets[s], offsets[s+1]) of src[index[j]][:]
  // added in j order (an empty segment writes zeros). offsets (segments + 1
  // entries) and index (offsets[segments]) are index memory. It is the
  // embedding bag's forward (segments = bags, src = the pulled rows) and its
  // backward (segments = distinct rows, index = the bags each row is in,
  // src = the bags' gradients): a scatter-add done as a gather, without
  // atomics, so that every run and every backend sums in the same order.
  virtual void SegmentSum(int segments, int dim, const int32_t* offsets,
                          const int32_t* index, const float* src,
                          float* out) = 0;
  // DLRM's dot interaction. Per sample b the vectors v_0 .. v_{n-1} (dim
  // floats each) are rows[b][0 .. n-2] (n - 1 of them, contiguous) and
  // last[b]; out[b] holds v_i . v_j for every pair i < j, in the order
  // (0,1), (0,2), ..., (1,2), ... (n(n-1)/2 per sample).
  virtual void PairDots(int batch, int n, int dim, const float* rows,
                        const float* last, float* out) = 0;
  // Its backward: adds sum over j != i of dout[b][pair(i, j)] v_j to the
  // gradient of each v_i (d_rows like rows, d_last like last).
  virtual void PairDotsGrad(int batch, int n, int dim, const float* rows,
                            const float* last, const float* dout,
                            float* d_rows, float* d_last) = 0;
  // Binary logistic loss over n logits: returns the summed
  // log(1 + e^z) - y z (computed stably, double accumulation) and writes
  // dlogits = (sigmoid(z) - y) * scale when dlogits is non-null. `labels`
  // (0 or 1) is host memory.
  virtual double SigmoidCrossEntropy(int n, const float* logits,
                                     const float* labels, float scale,
                                     float* dlogits) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_BACKEND_BACKEND_H_
