#include <cuda_runtime.h>

#include "worker/backend/cuda_kernels.h"

namespace fulcrum::cuda {
namespace {

constexpr int kThreads = 256;

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? b : 65535 * 16);
}

__global__ void AddBiasKernel(int rows, int cols, const float* bias,
                              float* x) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] += bias[i % cols];
  }
}

// One block per 32 columns; threads stride over rows, then reduce in shared
// memory: a deterministic sum order for a given launch shape.
__global__ void BiasGradKernel(int rows, int cols, const float* dy,
                               float* db) {
  __shared__ float partial[8][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += blockDim.y)
      sum += dy[static_cast<int64_t>(r) * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int y = 0; y < blockDim.y; ++y) total += partial[y][threadIdx.x];
    db[c] = total;
  }
}

__global__ void ReluKernel(int64_t n, float* x) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void ReluGradKernel(int64_t n, const float* y, float* dy) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (y[i] <= 0.0f) dy[i] = 0.0f;
  }
}

// One warp per row (classes are few: 10 for the reference model).
__global__ void SoftmaxCrossEntropyKernel(int rows, int cols,
                                          const float* logits,
                                          const int32_t* labels, float scale,
                                          float* dlogits, double* loss,
                                          int32_t* correct) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* z = logits + static_cast<int64_t>(row) * cols;
  float max = -INFINITY;
  int arg = 0;
  for (int c = lane; c < cols; c += 32) {
    if (z[c] > max) {
      max = z[c];
      arg = c;
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_down_sync(0xffffffffu, max, offset);
    const int other_arg = __shfl_down_sync(0xffffffffu, arg, offset);
    if (other > max || (other == max && other_arg < arg)) {
      max = other;
      arg = other_arg;
    }
  }
  max = __shfl_sync(0xffffffffu, max, 0);
  arg = __shfl_sync(0xffffffffu, arg, 0);
  double sum = 0.0;
  for (int c = lane; c < cols; c += 32) sum += exp(double(z[c] - max));
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
  sum = __shfl_sync(0xffffffffu, sum, 0);
  const double log_sum = log(sum);
  const int label = labels[row];
  if (dlogits != nullptr) {
    float* dz = dlogits + static_cast<int64_t>(row) * cols;
    for (int c = lane; c < cols; c += 32) {
      const double p = exp(double(z[c] - max) - log_sum);
      dz[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) * scale);
    }
  }
  if (lane == 0) {
    loss[row] = log_sum - double(z[label] - max);
    correct[row] = arg == label ? 1 : 0;
  }
}

// One thread per output element (segment, column), grid-striding:
// neighbouring threads read neighbouring columns of the same source row.
__global__ void SegmentSumKernel(int segments, int dim, const int32_t* offsets,
                                 const int32_t* index, const float* src,
                                 float* out) {
  const int64_t n = static_cast<int64_t>(segments) * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i / dim;
    const int d = static_cast<int>(i - s * dim);
    float sum = 0.0f;
    for (int32_t j = offsets[s]; j < offsets[s + 1]; ++j)
      sum += src[static_cast<int64_t>(index[j]) * dim + d];
    out[i] = sum;
  }
}

__global__ void SigmoidCrossEntropyKernel(int n, const float* logits,
                                          const float* labels, float scale,
                                          float* dlogits, double* loss) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double z = logits[i], y = labels[i];
    loss[i] = fmax(z, 0.0) - y * z + log1p(exp(-fabs(z)));
    if (dlogits != nullptr) {
      const double p =
          z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
      dlogits[i] = static_cast<float>((p - y) * scale);
    }
  }
}

__device__ const float* Vec(int b, int i, int n, int dim, const float* rows,
                            const float* last) {
  return i < n - 1 ? rows + (static_cast<int64_t>(b) * (n - 1) + i) * dim
                   : last + static_cast<int64_t>(b) * dim;
}

// One thread per (sample, pair).
__global__ void PairDotsKernel(int batch, int n, int dim, const float* rows,
                               const float* last, float* out) {
  const int64_t pairs = static_cast<int64_t>(n) * (n - 1) / 2;
  const int64_t total = pairs * batch;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int b = static_cast<int>(t / pairs);
    int64_t p = t - b * pairs;
    int i = 0;
    while (p >= n - 1 - i) {  // row i holds n - 1 - i pairs
      p -= n - 1 - i;
      ++i;
    }
    const int j = i + 1 + static_cast<int>(p);
    const float* x = Vec(b, i, n, dim, rows, last);
    const float* y = Vec(b, j, n, dim, rows, last);
    float dot = 0.0f;
    for (int d = 0; d < dim; ++d) dot += x[d] * y[d];
    out[t] = dot;
  }
}

// One thread per (sample, vector, column): j ascending, as the CPU.
__global__ void PairDotsGradKernel(int batch, int n, int dim, const float* rows,
                                   const float* last, const float* dout,
                                   float* d_rows, float* d_last) {
  const int64_t pairs = static_cast<int64_t>(n) * (n - 1) / 2;
  const int64_t total = static_cast<int64_t>(batch) * n * dim;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int b = static_cast<int>(t / (static_cast<int64_t>(n) * dim));
    const int64_t r = t - static_cast<int64_t>(b) * n * dim;
    const int i = static_cast<int>(r / dim);
    const int d = static_cast<int>(r - static_cast<int64_t>(i) * dim);
    const float* g = dout + b * pairs;
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      const int lo = i < j ? i : j, hi = i < j ? j : i;
      const int64_t p = static_cast<int64_t>(lo) * n -
                        static_cast<int64_t>(lo) * (lo + 1) / 2 + (hi - lo - 1);
      sum += g[p] * Vec(b, j, n, dim, rows, last)[d];
    }
    float* di = i < n - 1 ? d_rows + (static_cast<int64_t>(b) * (n - 1) + i) * dim
                          : d_last + static_cast<int64_t>(b) * dim;
    di[d] += sum;
  }
}

}  // namespace

void PairDots(int batch, int n, int dim, const float* rows, const float* last,
              float* out, void* stream) {
  const int64_t total = static_cast<int64_t>(batch) * n * (n - 1) / 2;
  if (total == 0) return;
  PairDotsKernel<<<Blocks(total), kThreads, 0, S(stream)>>>(batch, n, dim,
                                                            rows, last, out);
}

void PairDotsGrad(int batch, int n, int dim, const float* rows,
                  const float* last, const float* dout, float* d_rows,
                  float* d_last, void* stream) {
  const int64_t total = static_cast<int64_t>(batch) * n * dim;
  if (total == 0) return;
  PairDotsGradKernel<<<Blocks(total), kThreads, 0, S(stream)>>>(
      batch, n, dim, rows, last, dout, d_rows, d_last);
}

void SegmentSum(int segments, int dim, const int32_t* offsets,
                const int32_t* index, const float* src, float* out,
                void* stream) {
  const int64_t n = static_cast<int64_t>(segments) * dim;
  if (n == 0) return;
  SegmentSumKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(
      segments, dim, offsets, index, src, out);
}

void SigmoidCrossEntropy(int n, const float* logits, const float* labels,
                         float scale, float* dlogits, double* loss,
                         void* stream) {
  if (n == 0) return;
  SigmoidCrossEntropyKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(
      n, logits, labels, scale, dlogits, loss);
}

void AddBias(int rows, int cols, const float* bias, float* x, void* stream) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n == 0) return;
  AddBiasKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(rows, cols, bias, x);
}

void BiasGrad(int rows, int cols, const float* dy, float* db, void* stream) {
  if (cols == 0) return;
  const dim3 block(32, 8);
  BiasGradKernel<<<(cols + 31) / 32, block, 0, S(stream)>>>(rows, cols, dy,
                                                             db);
}

void Relu(int64_t n, float* x, void* stream) {
  if (n == 0) return;
  ReluKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(n, x);
}

void ReluGrad(int64_t n, const float* y, float* dy, void* stream) {
  if (n == 0) return;
  ReluGradKernel<<<Blocks(n), kThreads, 0, S(stream)>>>(n, y, dy);
}

void SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                         const int32_t* labels, float scale, float* dlogits,
                         double* loss, int32_t* correct, void* stream) {
  if (rows == 0) return;
  constexpr int kRowsPerBlock = 8;
  SoftmaxCrossEntropyKernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock,
                              32 * kRowsPerBlock, 0, S(stream)>>>(
      rows, cols, logits, labels, scale, dlogits, loss, correct);
}

}  // namespace fulcrum::cuda
