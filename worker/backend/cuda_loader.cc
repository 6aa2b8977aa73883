#include "worker/backend/cuda_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

struct Plugin {
  int (*device_count)() = nullptr;
  Backend* (*create)(int, int, char*, size_t) = nullptr;
  std::string error;
};

std::string ExecutableDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  std::string dir(path);
  return dir.substr(0, dir.rfind('/'));
}

const Plugin& Load() {
  static const Plugin* plugin = [] {
    auto* p = new Plugin;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("FULCRUM_CUDA_PLUGIN")) {
      candidates.push_back(env);
    }
    const std::string dir = ExecutableDir();
    candidates.push_back(dir + "/backend/libfulcrum_cuda.so");
    candidates.push_back(dir + "/libfulcrum_cuda.so");
    void* lib = nullptr;
    std::string errors;
    for (const std::string& c : candidates) {
      lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      const char* e = dlerror();
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", e ? e : c);
    }
    if (lib == nullptr) {
      p->error = absl::StrCat(
          "this build has no CUDA backend, or its plugin cannot be loaded (",
          errors, ")");
      return p;
    }
    p->device_count =
        reinterpret_cast<int (*)()>(dlsym(lib, "FulcrumCudaDeviceCount"));
    p->create = reinterpret_cast<Backend* (*)(int, int, char*, size_t)>(
        dlsym(lib, "FulcrumCreateCudaBackend"));
    if (p->device_count == nullptr || p->create == nullptr)
      p->error = "the CUDA plugin lacks its entry points";
    return p;
  }();
  return *plugin;
}

}  // namespace

int CudaDeviceCount() {
  const Plugin& p = Load();
  return p.error.empty() ? p.device_count() : 0;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device,
                                                           bool tf32) {
  const Plugin& p = Load();
  if (!p.error.empty()) return absl::FailedPreconditionError(p.error);
  char error[512] = {0};
  Backend* b = p.create(device, tf32 ? 1 : 0, error, sizeof(error));
  if (b == nullptr) {
    const std::string text(error);
    if (text.find("must be in") != std::string::npos)
      return absl::InvalidArgumentError(text);
    return absl::FailedPreconditionError(text);
  }
  return std::unique_ptr<Backend>(b);
}

}  // namespace fulcrum
