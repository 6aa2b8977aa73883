// The CUDA backend as a plugin (libfulcrum_cuda.so) that the worker loads
// with dlopen (cuda_loader.h). Linking the CUDA runtime into the worker
// itself would add its thread-local storage to every thread's static TLS,
// and on top of OpenBLAS's 60 KiB that overflows the small fixed stacks of
// civetweb's metrics threads; a dlopen'ed library's TLS is allocated lazily
// per thread instead.
#include <cstring>
#include <string>

#include "worker/backend/cuda_backend.h"

extern "C" {

int FulcrumCudaDeviceCount() { return fulcrum::CudaBackend::DeviceCount(); }

// Returns a new backend, or null with the reason in `error` (NUL-ended,
// truncated to `error_size`).
fulcrum::Backend* FulcrumCreateCudaBackend(int device, int tf32, char* error,
                                           size_t error_size) {
  auto created = fulcrum::CudaBackend::Create(
      {.device = device, .tf32 = tf32 != 0});
  if (!created.ok()) {
    const std::string text(created.status().message());
    if (error_size > 0) {
      std::strncpy(error, text.c_str(), error_size - 1);
      error[error_size - 1] = '\0';
    }
    return nullptr;
  }
  return created->release();
}

}  // extern "C"
