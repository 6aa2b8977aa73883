// Per-step time of an MLP training step (forward + backward, batch B) on a
// backend: Fulcrum's CUDA backend (or the CPU one), for comparison with the
// same model in PyTorch on the same device (bench/torch_gpu_step.py). Prints
// one line per model: "model LAYERS device D batch B ms_per_step X".
//
//   gpu_step [--device cuda:0|cpu] [--batch 64] [--steps 200] [--tf32]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tensor/layout.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/mlp.h"
#ifdef FULCRUM_HAVE_CUDA
#include "worker/backend/cuda_backend.h"
#endif

namespace {

double StepMs(fulcrum::Backend* backend, const std::vector<int>& layers,
              int batch, int steps) {
  auto layout = fulcrum::ParameterLayout::ForMlp(layers, 1, 1 << 30);
  if (!layout.ok()) return -1;
  const int64_t total = layout->total_size();
  std::vector<float> params(total);
  fulcrum::InitializeParameters(*layout, 1, 0, total, params.data());
  std::vector<float> x(static_cast<int64_t>(batch) * layers.front());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& v : x) v = u(rng);
  std::vector<int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = i % layers.back();
  float* p = backend->Allocate(total);
  float* g = backend->Allocate(total);
  float* xd = backend->Allocate(static_cast<int64_t>(x.size()));
  backend->CopyToDevice(params.data(), p, total);
  backend->CopyToDevice(x.data(), xd, static_cast<int64_t>(x.size()));
  fulcrum::Mlp mlp(backend, *layout, batch);
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i)
      mlp.ForwardBackward(p, xd, y.data(), batch, g, [](int64_t) {});
    backend->Synchronize();
  };
  run(20);  // warm-up: cuBLAS heuristics, caches
  const auto start = std::chrono::steady_clock::now();
  run(steps);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                start)
          .count() /
      steps;
  backend->Free(p);
  backend->Free(g);
  backend->Free(xd);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cuda:0";
  int batch = 64, steps = 200;
  bool tf32 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (a == "--batch" && i + 1 < argc) batch = std::atoi(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--tf32") tf32 = true;
    else {
      std::cerr << "usage: gpu_step [--device cuda:N|cpu] [--batch B] "
                   "[--steps N] [--tf32]\n";
      return 2;
    }
  }
  std::unique_ptr<fulcrum::Backend> backend;
  if (device == "cpu") {
    backend = std::make_unique<fulcrum::CpuBackend>(1);
  } else {
#ifdef FULCRUM_HAVE_CUDA
    const int index = device.size() > 5 ? std::atoi(device.c_str() + 5) : 0;
    auto gpu = fulcrum::CudaBackend::Create({.device = index, .tf32 = tf32});
    if (!gpu.ok()) {
      std::cerr << "gpu_step: " << gpu.status() << "\n";
      return 1;
    }
    backend = std::move(*gpu);
#else
    std::cerr << "gpu_step: built without CUDA"
              << (tf32 ? " (--tf32 needs it too)" : "") << "\n";
    return 1;
#endif
  }
  const std::vector<std::vector<int>> models = {{784, 256, 128, 10},
                                                {784, 4096, 4096, 10}};
  for (const auto& layers : models) {
    std::string name;
    for (int l : layers) name += (name.empty() ? "" : "-") + std::to_string(l);
    std::printf("model %s device %s batch %d ms_per_step %.4f\n", name.c_str(),
                backend->Name().c_str(), batch,
                StepMs(backend.get(), layers, batch, steps));
  }
  return 0;
}
