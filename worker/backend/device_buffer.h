// A buffer in a backend's memory that aliases host memory when the backend
// computes on host memory (no staging copies), else is allocated there and
// freed with the buffer.
#ifndef FULCRUM_WORKER_BACKEND_DEVICE_BUFFER_H_
#define FULCRUM_WORKER_BACKEND_DEVICE_BUFFER_H_

#include <cstdint>

#include "worker/backend/backend.h"

namespace fulcrum {

class DeviceBuffer {
 public:
  // `backend` and `host` (n floats) are not owned and must outlive it. A
  // failed allocation leaves get() null and backend->status() bad.
  DeviceBuffer(Backend* backend, float* host, int64_t n)
      : backend_(backend),
        ptr_(backend->HostAccessible() ? host : backend->Allocate(n)) {}
  ~DeviceBuffer() {
    if (!backend_->HostAccessible() && ptr_ != nullptr) backend_->Free(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return ptr_; }

 private:
  Backend* const backend_;  // Not owned.
  float* const ptr_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_BACKEND_DEVICE_BUFFER_H_
