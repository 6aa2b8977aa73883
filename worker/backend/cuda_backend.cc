#include "worker/backend/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "worker/backend/cuda_kernels.h"

namespace fulcrum {
namespace {

std::string CudaError(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

std::string CublasError(cublasStatus_t s) {
  return absl::StrCat("cuBLAS status ", static_cast<int>(s));
}

// Return an INTERNAL status naming `what` when a CUDA (cuBLAS) call fails.
#define CUDA_RETURN_IF_ERROR(expr, what)                                  \
  do {                                                                    \
    const cudaError_t fulcrum_cuda_ = (expr);                             \
    if (fulcrum_cuda_ != cudaSuccess)                                     \
      return absl::InternalError(                                         \
          absl::StrCat(what, ": ", CudaError(fulcrum_cuda_)));            \
  } while (0)
#define CUBLAS_RETURN_IF_ERROR(expr, what)                                \
  do {                                                                    \
    const cublasStatus_t fulcrum_cublas_ = (expr);                        \
    if (fulcrum_cublas_ != CUBLAS_STATUS_SUCCESS)                         \
      return absl::InternalError(                                         \
          absl::StrCat(what, ": ", CublasError(fulcrum_cublas_)));        \
  } while (0)

// cuBLAS, loaded when the first CudaBackend is created rather than linked:
// libcublasLt's ~94 KiB of thread-local storage would otherwise count
// against every thread's stack, and libraries that create threads with
// small stacks (civetweb's metrics server) then fail with EINVAL. A
// dlopen'ed library's TLS is allocated per thread on demand instead.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  std::string error;
};

const Cublas& LoadCublas() {
  static const Cublas* loaded = [] {
    auto* c = new Cublas;
    void* lib = nullptr;
    for (const char* name :
         {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13",
          "libcublas.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
    }
    if (lib == nullptr) {
      c->error = absl::StrCat("cannot load cuBLAS: ", dlerror());
      return c;
    }
    c->create = reinterpret_cast<decltype(c->create)>(
        dlsym(lib, "cublasCreate_v2"));
    c->destroy = reinterpret_cast<decltype(c->destroy)>(
        dlsym(lib, "cublasDestroy_v2"));
    c->set_stream = reinterpret_cast<decltype(c->set_stream)>(
        dlsym(lib, "cublasSetStream_v2"));
    c->set_math_mode = reinterpret_cast<decltype(c->set_math_mode)>(
        dlsym(lib, "cublasSetMathMode"));
    c->sgemm =
        reinterpret_cast<decltype(c->sgemm)>(dlsym(lib, "cublasSgemm_v2"));
    if (!c->create || !c->destroy || !c->set_stream || !c->set_math_mode ||
        !c->sgemm) {
      c->error = "cuBLAS lacks an expected function";
    }
    return c;
  }();
  return *loaded;
}

}  // namespace

struct CudaBackend::Impl {
  int device = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  cublasHandle_t blas = nullptr;
  // Per-row scratch for softmax cross-entropy, device and page-locked host.
  int rows_capacity = 0;
  int32_t* labels_dev = nullptr;
  double* loss_dev = nullptr;
  int32_t* correct_dev = nullptr;
  int32_t* labels_host = nullptr;
  double* loss_host = nullptr;
  int32_t* correct_host = nullptr;
  float* targets_dev = nullptr;   // 0/1 labels of the logistic loss
  float* targets_host = nullptr;
  // Async copies: one event per ticket, reused round-robin.
  std::vector<cudaEvent_t> ready;  // compute reached the copy point
  std::vector<cudaEvent_t> done;   // the copy finished
  int next_ticket = 0;
  // Async copies to the device: compute reached the copy point / the copies
  // queued so far on the copy stream finished.
  cudaEvent_t h2d_ready = nullptr;
  cudaEvent_t h2d_done = nullptr;

  // Streams and cuBLAS of `device`.
  absl::Status Init(const CudaBackend::Options& options) {
    const std::string where = absl::StrCat("cuda:", options.device);
    CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device), where);
    CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), where);
    CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), where);
    const Cublas& b = LoadCublas();
    if (!b.error.empty()) return absl::FailedPreconditionError(b.error);
    CUBLAS_RETURN_IF_ERROR(b.create(&blas), where);
    CUBLAS_RETURN_IF_ERROR(b.set_stream(blas, compute), where);
    CUBLAS_RETURN_IF_ERROR(
        b.set_math_mode(blas, options.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                           : CUBLAS_DEFAULT_MATH),
        where);
    return absl::OkStatus();
  }
  // Room for `rows` labels, losses and hit counts on both sides.
  absl::Status GrowScratch(int rows) {
    if (rows <= rows_capacity) return absl::OkStatus();
    cudaFree(labels_dev);
    cudaFree(loss_dev);
    cudaFree(correct_dev);
    cudaFreeHost(labels_host);
    cudaFreeHost(loss_host);
    cudaFreeHost(correct_host);
    cudaFree(targets_dev);
    cudaFreeHost(targets_host);
    labels_dev = correct_dev = labels_host = correct_host = nullptr;
    loss_dev = loss_host = nullptr;
    targets_dev = targets_host = nullptr;
    rows_capacity = 0;
    const char* what = "softmax scratch";
    CUDA_RETURN_IF_ERROR(cudaMalloc(&labels_dev, rows * sizeof(int32_t)), what);
    CUDA_RETURN_IF_ERROR(cudaMalloc(&loss_dev, rows * sizeof(double)), what);
    CUDA_RETURN_IF_ERROR(cudaMalloc(&correct_dev, rows * sizeof(int32_t)), what);
    CUDA_RETURN_IF_ERROR(cudaMallocHost(&labels_host, rows * sizeof(int32_t)),
                         what);
    CUDA_RETURN_IF_ERROR(cudaMallocHost(&loss_host, rows * sizeof(double)),
                         what);
    CUDA_RETURN_IF_ERROR(
        cudaMallocHost(&correct_host, rows * sizeof(int32_t)), what);
    CUDA_RETURN_IF_ERROR(cudaMalloc(&targets_dev, rows * sizeof(float)), what);
    CUDA_RETURN_IF_ERROR(cudaMallocHost(&targets_host, rows * sizeof(float)),
                         what);
    rows_capacity = rows;
    return absl::OkStatus();
  }
  // Loss and hits of `rows` logits (dlogits too when not null), back on
  // the host.
  absl::Status Softmax(int rows, int cols, const float* logits,
                       const int32_t* labels, float scale, float* dlogits) {
    const char* what = "softmax cross-entropy";
    std::copy(labels, labels + rows, labels_host);
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(labels_dev, labels_host, rows * sizeof(int32_t),
                        cudaMemcpyHostToDevice, compute),
        what);
    cuda::SoftmaxCrossEntropy(rows, cols, logits, labels_dev, scale, dlogits,
                              loss_dev, correct_dev, compute);
    CUDA_RETURN_IF_ERROR(cudaGetLastError(), what);
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(loss_host, loss_dev, rows * sizeof(double),
                        cudaMemcpyDeviceToHost, compute),
        what);
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(correct_host, correct_dev, rows * sizeof(int32_t),
                        cudaMemcpyDeviceToHost, compute),
        what);
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute), what);
    return absl::OkStatus();
  }
  // The logistic loss of n logits into loss_host (dlogits too when not
  // null).
  absl::Status Sigmoid(int n, const float* logits, const float* labels,
                       float scale, float* dlogits) {
    const char* what = "sigmoid cross-entropy";
    std::copy(labels, labels + n, targets_host);
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(targets_dev, targets_host, n * sizeof(float),
                        cudaMemcpyHostToDevice, compute),
        what);
    cuda::SigmoidCrossEntropy(n, logits, targets_dev, scale, dlogits,
                              loss_dev, compute);
    CUDA_RETURN_IF_ERROR(cudaGetLastError(), what);
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(loss_host, loss_dev, n * sizeof(double),
                        cudaMemcpyDeviceToHost, compute),
        what);
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute), what);
    return absl::OkStatus();
  }
};

int CudaBackend::DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    Options options) {
  const int count = DeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device (no GPU or no driver visible to this process)");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device must be in [0, ", count, "), got cuda:",
                     options.device));
  }
  auto impl = std::make_unique<Impl>();
  impl->device = options.device;
  if (absl::Status s = impl->Init(options); !s.ok()) return s;
  constexpr int kTickets = 64;
  for (int i = 0; i < kTickets; ++i) {
    cudaEvent_t r, d;
    cudaEventCreateWithFlags(&r, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&d, cudaEventDisableTiming);
    impl->ready.push_back(r);
    impl->done.push_back(d);
  }
  cudaEventCreateWithFlags(&impl->h2d_ready, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&impl->h2d_done, cudaEventDisableTiming);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, options.device);
  std::string name = absl::StrCat("cuda:", options.device, " (", prop.name,
                                  options.tf32 ? ", tf32" : "", ")");
  return std::unique_ptr<CudaBackend>(
      new CudaBackend(std::move(impl), std::move(name)));
}

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl, std::string name)
    : impl_(std::move(impl)), name_(std::move(name)) {}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(impl_->compute);
  cudaStreamSynchronize(impl_->copy);
  for (cudaEvent_t e : impl_->ready) cudaEventDestroy(e);
  for (cudaEvent_t e : impl_->done) cudaEventDestroy(e);
  cudaEventDestroy(impl_->h2d_ready);
  cudaEventDestroy(impl_->h2d_done);
  cudaFree(impl_->labels_dev);
  cudaFree(impl_->loss_dev);
  cudaFree(impl_->correct_dev);
  cudaFreeHost(impl_->labels_host);
  cudaFreeHost(impl_->loss_host);
  cudaFreeHost(impl_->correct_host);
  cudaFree(impl_->targets_dev);
  cudaFreeHost(impl_->targets_host);
  if (impl_->blas != nullptr) LoadCublas().destroy(impl_->blas);
  cudaStreamDestroy(impl_->compute);
  cudaStreamDestroy(impl_->copy);
}

bool CudaBackend::Check(const absl::Status& s) {
  if (!s.ok() && status_.ok()) {
    status_ = absl::Status(s.code(), absl::StrCat(name_, ": ", s.message()));
    std::cerr << "fulcrum-worker: " << status_ << "\n";
  }
  return s.ok();
}

bool CudaBackend::Check(bool ok, const std::string& what) {
  if (!ok && status_.ok()) {
    status_ = absl::InternalError(absl::StrCat(name_, ": ", what));
    std::cerr << "fulcrum-worker: " << status_ << "\n";
  }
  return ok;
}

float* CudaBackend::Allocate(int64_t n) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(float));
  if (e != cudaSuccess) {
    // The failure stays in the thread's last error, where the next kernel
    // launch's check would take it for its own (seen on an H200: a later
    // softmax reported "out of memory"): clear it, status_ keeps it.
    cudaGetLastError();
    // Backend contract: null, and a sticky RESOURCE_EXHAUSTED status.
    if (status_.ok()) {
      status_ = absl::ResourceExhaustedError(absl::StrCat(
          name_, ": cannot allocate ", n, " floats: ", CudaError(e)));
    }
    return nullptr;
  }
  return static_cast<float*>(p);
}

void CudaBackend::Free(float* p) { cudaFree(p); }

void CudaBackend::CopyToDevice(const float* host, float* device, int64_t n) {
  // Ordered with compute: later kernels see the new values.
  const cudaError_t e = cudaMemcpyAsync(device, host, n * sizeof(float),
                                        cudaMemcpyHostToDevice, impl_->compute);
  Check(e == cudaSuccess, "copy to device: " + CudaError(e));
}

void CudaBackend::CopyToHost(const float* device, float* host, int64_t n) {
  cudaError_t e = cudaMemcpyAsync(host, device, n * sizeof(float),
                                  cudaMemcpyDeviceToHost, impl_->compute);
  if (e == cudaSuccess) e = cudaStreamSynchronize(impl_->compute);
  Check(e == cudaSuccess, "copy to host: " + CudaError(e));
}

int CudaBackend::CopyToHostAsync(const float* device, float* host, int64_t n) {
  const int ticket = impl_->next_ticket;
  impl_->next_ticket = (ticket + 1) % static_cast<int>(impl_->ready.size());
  // The copy stream waits for compute to reach this point, then copies
  // while compute goes on with earlier layers.
  cudaError_t e = cudaEventRecord(impl_->ready[ticket], impl_->compute);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(impl_->copy, impl_->ready[ticket], 0);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(host, device, n * sizeof(float),
                        cudaMemcpyDeviceToHost, impl_->copy);
  if (e == cudaSuccess) e = cudaEventRecord(impl_->done[ticket], impl_->copy);
  Check(e == cudaSuccess, "async copy to host: " + CudaError(e));
  return ticket;
}

void CudaBackend::WaitCopy(int ticket) {
  const cudaError_t e = cudaEventSynchronize(impl_->done[ticket]);
  Check(e == cudaSuccess, "waiting for a copy: " + CudaError(e));
}

void CudaBackend::CopyToDeviceAsync(const float* host, float* device,
                                    int64_t n) {
  // Compute may still read `device` (backward uses the weights): the copy
  // starts once compute queued so far is done.
  cudaError_t e = cudaEventRecord(impl_->h2d_ready, impl_->compute);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(impl_->copy, impl_->h2d_ready, 0);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(device, host, n * sizeof(float),
                        cudaMemcpyHostToDevice, impl_->copy);
  Check(e == cudaSuccess, "async copy to device: " + CudaError(e));
}

void CudaBackend::ComputeWaitsForCopies() {
  cudaError_t e = cudaEventRecord(impl_->h2d_done, impl_->copy);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(impl_->compute, impl_->h2d_done, 0);
  Check(e == cudaSuccess, "waiting for copies to the device: " + CudaError(e));
}

void CudaBackend::RegisterHost(float* host, int64_t n) {
  const cudaError_t e =
      cudaHostRegister(host, n * sizeof(float), cudaHostRegisterDefault);
  if (e != cudaSuccess) cudaGetLastError();  // pageable still works, slower
}

void CudaBackend::UnregisterHost(float* host) {
  if (cudaHostUnregister(host) != cudaSuccess) cudaGetLastError();
}

void CudaBackend::Synchronize() {
  cudaError_t e = cudaStreamSynchronize(impl_->compute);
  if (e == cudaSuccess) e = cudaStreamSynchronize(impl_->copy);
  if (e == cudaSuccess) e = cudaGetLastError();
  Check(e == cudaSuccess, "synchronize: " + CudaError(e));
}

void CudaBackend::GemmStrided(bool trans_a, bool trans_b, int m, int n, int k,
                              float alpha, const float* a, int lda,
                              const float* b, int ldb, float beta, float* c,
                              int ldc) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const cublasStatus_t s = LoadCublas().sgemm(
      impl_->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda,
      &beta, c, ldc);
  Check(s == CUBLAS_STATUS_SUCCESS, "gemm: " + CublasError(s));
}

void CudaBackend::AddBias(int rows, int cols, const float* bias, float* x) {
  cuda::AddBias(rows, cols, bias, x, impl_->compute);
}

void CudaBackend::BiasGrad(int rows, int cols, const float* dy, float* db) {
  cuda::BiasGrad(rows, cols, dy, db, impl_->compute);
}

void CudaBackend::Relu(int64_t n, float* x) {
  cuda::Relu(n, x, impl_->compute);
}

void CudaBackend::ReluGrad(int64_t n, const float* y, float* dy) {
  cuda::ReluGrad(n, y, dy, impl_->compute);
}

bool CudaBackend::RunSoftmax(int rows, int cols, const float* logits,
                             const int32_t* labels, float scale,
                             float* dlogits) {
  absl::Status s = impl_->GrowScratch(rows);
  if (s.ok()) s = impl_->Softmax(rows, cols, logits, labels, scale, dlogits);
  return Check(s);
}

double CudaBackend::SoftmaxCrossEntropy(int rows, int cols,
                                        const float* logits,
                                        const int32_t* labels, float scale,
                                        float* dlogits) {
  if (!RunSoftmax(rows, cols, logits, labels, scale, dlogits)) return 0.0;
  double loss = 0.0;
  for (int r = 0; r < rows; ++r) loss += impl_->loss_host[r];
  return loss;
}

int64_t CudaBackend::CountCorrect(int rows, int cols, const float* logits,
                                  const int32_t* labels) {
  if (!RunSoftmax(rows, cols, logits, labels, 0.0f, nullptr)) return 0;
  int64_t correct = 0;
  for (int r = 0; r < rows; ++r) correct += impl_->correct_host[r];
  return correct;
}

int32_t* CudaBackend::AllocateIndices(int64_t n) {
  void* p = nullptr;
  const cudaError_t e =
      cudaMalloc(&p, std::max<int64_t>(n, 1) * sizeof(int32_t));
  if (e != cudaSuccess) {
    cudaGetLastError();  // as in Allocate
    if (status_.ok()) {
      status_ = absl::ResourceExhaustedError(absl::StrCat(
          name_, ": cannot allocate ", n, " indices: ", CudaError(e)));
    }
    return nullptr;
  }
  return static_cast<int32_t*>(p);
}

void CudaBackend::FreeIndices(int32_t* p) { cudaFree(p); }

void CudaBackend::CopyIndicesToDevice(const int32_t* host, int32_t* device,
                                      int64_t n) {
  const cudaError_t e = cudaMemcpyAsync(device, host, n * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, impl_->compute);
  Check(e == cudaSuccess, "copy of indices to device: " + CudaError(e));
}

void CudaBackend::SegmentSum(int segments, int dim, const int32_t* offsets,
                             const int32_t* index, const float* src,
                             float* out) {
  cuda::SegmentSum(segments, dim, offsets, index, src, out, impl_->compute);
}

double CudaBackend::SigmoidCrossEntropy(int n, const float* logits,
                                        const float* labels, float scale,
                                        float* dlogits) {
  absl::Status s = impl_->GrowScratch(n);
  if (s.ok()) s = impl_->Sigmoid(n, logits, labels, scale, dlogits);
  if (!Check(s)) return 0.0;
  double loss = 0.0;
  for (int i = 0; i < n; ++i) loss += impl_->loss_host[i];
  return loss;
}

void CudaBackend::PairDots(int batch, int n, int dim, const float* rows,
                           const float* last, float* out) {
  cuda::PairDots(batch, n, dim, rows, last, out, impl_->compute);
}

void CudaBackend::PairDotsGrad(int batch, int n, int dim, const float* rows,
                               const float* last, const float* dout,
                               float* d_rows, float* d_last) {
  cuda::PairDotsGrad(batch, n, dim, rows, last, dout, d_rows, d_last,
                     impl_->compute);
}

}  // namespace fulcrum
