// The CUDA kernels of CudaBackend, as plain launchers (no CUDA types in the
// interface, so that gcc-compiled code can call them). Every launcher
// enqueues on `stream` (a cudaStream_t passed as void*) and returns at once.
// Pointers are device memory; matrices are row-major.
#ifndef FULCRUM_WORKER_BACKEND_CUDA_KERNELS_H_
#define FULCRUM_WORKER_BACKEND_CUDA_KERNELS_H_

#include <cstdint>

namespace fulcrum::cuda {

// x[r][c] += bias[c].
void AddBias(int rows, int cols, const float* bias, float* x, void* stream);
// db[c] = sum_r dy[r][c].
void BiasGrad(int rows, int cols, const float* dy, float* db, void* stream);
// x = max(x, 0).
void Relu(int64_t n, float* x, void* stream);
// dy = 0 where y <= 0.
void ReluGrad(int64_t n, const float* y, float* dy, void* stream);
// Per row r: loss[r] = logsumexp(z_r) - z_r[label_r] (double precision
// accumulation); dlogits = (softmax(z_r) - onehot(label_r)) * scale;
// correct[r] = 1 if argmax(z_r) == label_r. dlogits may be null (evaluation).
void SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                         const int32_t* labels, float scale, float* dlogits,
                         double* loss, int32_t* correct, void* stream);

// out[s][:] = sum over j in [offsets[s], offsets[s+1]) of src[index[j]][:],
// rows of `dim` floats, added in j order (Backend::SegmentSum).
void SegmentSum(int segments, int dim, const int32_t* offsets,
                const int32_t* index, const float* src, float* out,
                void* stream);
// loss[i] = log(1 + e^z_i) - y_i z_i (double); dlogits[i] =
// (sigmoid(z_i) - y_i) * scale unless dlogits is null.
void SigmoidCrossEntropy(int n, const float* logits, const float* labels,
                         float scale, float* dlogits, double* loss,
                         void* stream);

// Backend::PairDots / PairDotsGrad (same order of additions as the CPU's).
void PairDots(int batch, int n, int dim, const float* rows, const float* last,
              float* out, void* stream);
void PairDotsGrad(int batch, int n, int dim, const float* rows,
                  const float* last, const float* dout, float* d_rows,
                  float* d_last, void* stream);

}  // namespace fulcrum::cuda

#endif  // FULCRUM_WORKER_BACKEND_CUDA_KERNELS_H_
