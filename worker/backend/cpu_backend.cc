#include "worker/backend/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace fulcrum {

CpuBackend::CpuBackend(int threads) {
  openblas_set_num_threads(std::max(1, threads));
}

float* CpuBackend::Allocate(int64_t n) {
  const size_t bytes =
      ((std::max<int64_t>(n, 1) * sizeof(float) + 63) / 64) * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) std::abort();
  std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}

void CpuBackend::Free(float* p) { std::free(p); }

void CpuBackend::CopyToDevice(const float* host, float* device, int64_t n) {
  if (host != device) std::memcpy(device, host, n * sizeof(float));
}

void CpuBackend::CopyToHost(const float* device, float* host, int64_t n) {
  if (host != device) std::memcpy(host, device, n * sizeof(float));
}

void CpuBackend::GemmStrided(bool trans_a, bool trans_b, int m, int n, int k,
                             float alpha, const float* a, int lda,
                             const float* b, int ldb, float beta, float* c,
                             int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

void CpuBackend::AddBias(int rows, int cols, const float* bias, float* x) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void CpuBackend::BiasGrad(int rows, int cols, const float* dy, float* db) {
  std::fill(db, db + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) db[c] += row[c];
  }
}

void CpuBackend::Relu(int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void CpuBackend::ReluGrad(int64_t n, const float* y, float* dy) {
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

double CpuBackend::SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                       const int32_t* labels, float scale,
                                       float* dlogits) {
  double loss = 0.0;
  for (int r = 0; r < rows; ++r) {
    const float* z = logits + static_cast<int64_t>(r) * cols;
    float* dz = dlogits + static_cast<int64_t>(r) * cols;
    const float max = *std::max_element(z, z + cols);
    double sum = 0.0;
    for (int c = 0; c < cols; ++c)
      sum += std::exp(static_cast<double>(z[c] - max));
    const double log_sum = std::log(sum);
    loss += log_sum - (z[labels[r]] - max);
    for (int c = 0; c < cols; ++c) {
      const double p = std::exp(static_cast<double>(z[c] - max) - log_sum);
      dz[c] = static_cast<float>((p - (c == labels[r] ? 1.0 : 0.0)) * scale);
    }
  }
  return loss;
}

int64_t CpuBackend::CountCorrect(int rows, int cols, const float* logits,
                                 const int32_t* labels) {
  int64_t correct = 0;
  for (int r = 0; r < rows; ++r) {
    const float* z = logits + static_cast<int64_t>(r) * cols;
    if (std::max_element(z, z + cols) - z == labels[r]) ++correct;
  }
  return correct;
}

int32_t* CpuBackend::AllocateIndices(int64_t n) {
  // Same size and alignment as floats.
  return reinterpret_cast<int32_t*>(Allocate(n));
}

void CpuBackend::FreeIndices(int32_t* p) { std::free(p); }

void CpuBackend::CopyIndicesToDevice(const int32_t* host, int32_t* device,
                                     int64_t n) {
  if (host != device) std::memcpy(device, host, n * sizeof(int32_t));
}

void CpuBackend::SegmentSum(int segments, int dim, const int32_t* offsets,
                            const int32_t* index, const float* src,
                            float* out) {
  for (int s = 0; s < segments; ++s) {
    float* o = out + static_cast<int64_t>(s) * dim;
    std::fill(o, o + dim, 0.0f);
    for (int32_t j = offsets[s]; j < offsets[s + 1]; ++j) {
      const float* row = src + static_cast<int64_t>(index[j]) * dim;
      for (int d = 0; d < dim; ++d) o[d] += row[d];
    }
  }
}

double CpuBackend::SigmoidCrossEntropy(int n, const float* logits,
                                       const float* labels, float scale,
                                       float* dlogits) {
  double loss = 0.0;
  for (int i = 0; i < n; ++i) {
    const double z = logits[i], y = labels[i];
    // log(1 + e^z) - y z = max(z, 0) - y z + log(1 + e^-|z|)
    loss += std::max(z, 0.0) - y * z + std::log1p(std::exp(-std::fabs(z)));
    if (dlogits != nullptr) {
      const double p = z >= 0 ? 1.0 / (1.0 + std::exp(-z))
                              : std::exp(z) / (1.0 + std::exp(z));
      dlogits[i] = static_cast<float>((p - y) * scale);
    }
  }
  return loss;
}

void CpuBackend::PairDots(int batch, int n, int dim, const float* rows,
                          const float* last, float* out) {
  const int64_t pairs = int64_t{n} * (n - 1) / 2;
  for (int b = 0; b < batch; ++b) {
    const float* base = rows + int64_t{b} * (n - 1) * dim;
    const auto v = [&](int i) {
      return i < n - 1 ? base + int64_t{i} * dim : last + int64_t{b} * dim;
    };
    float* o = out + b * pairs;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        const float* x = v(i);
        const float* y = v(j);
        float dot = 0.0f;
        for (int d = 0; d < dim; ++d) dot += x[d] * y[d];
        *o++ = dot;
      }
    }
  }
}

void CpuBackend::PairDotsGrad(int batch, int n, int dim, const float* rows,
                              const float* last, const float* dout,
                              float* d_rows, float* d_last) {
  const int64_t pairs = int64_t{n} * (n - 1) / 2;
  for (int b = 0; b < batch; ++b) {
    const int64_t base = int64_t{b} * (n - 1) * dim;
    const auto v = [&](int i) {
      return i < n - 1 ? rows + base + int64_t{i} * dim : last + int64_t{b} * dim;
    };
    const auto dv = [&](int i) {
      return i < n - 1 ? d_rows + base + int64_t{i} * dim
                       : d_last + int64_t{b} * dim;
    };
    const float* g = dout + b * pairs;
    // In the CUDA kernel's order: for each i, j ascending.
    for (int i = 0; i < n; ++i) {
      float* di = dv(i);
      for (int d = 0; d < dim; ++d) {
        float sum = 0.0f;
        for (int j = 0; j < n; ++j) {
          if (j == i) continue;
          const int lo = std::min(i, j), hi = std::max(i, j);
          const int64_t p = int64_t{lo} * n - int64_t{lo} * (lo + 1) / 2 + (hi - lo - 1);
          sum += g[p] * v(j)[d];
        }
        di[d] += sum;
      }
    }
  }
}

}  // namespace fulcrum
