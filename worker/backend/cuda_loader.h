// Loads the CUDA backend plugin (cuda_plugin.cc) at run time. The plugin is
// looked for in $FULCRUM_CUDA_PLUGIN, then next to the executable
// (backend/libfulcrum_cuda.so, libfulcrum_cuda.so). Builds without CUDA have
// no plugin: DeviceCount() is 0 and Create says so.
#ifndef FULCRUM_WORKER_BACKEND_CUDA_LOADER_H_
#define FULCRUM_WORKER_BACKEND_CUDA_LOADER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"

namespace fulcrum {

// CUDA devices visible to this process; 0 without the plugin, a driver or a
// GPU.
int CudaDeviceCount();

// FAILED_PRECONDITION without the plugin or a device; INVALID_ARGUMENT for
// a device index out of range.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device,
                                                           bool tf32);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_BACKEND_CUDA_LOADER_H_
