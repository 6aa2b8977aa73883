// Per-step time of an MLP training step (forward + backward, batch B) on a
// backend: Fulcrum's CUDA backend (or the CPU one), for comparison with the
// same model in PyTorch on the same device (bench/torch_gpu_step.py). Prints
// one line per model: "model LAYERS device D batch B ms_per_step X".
// Then the recommender model of issue 14 (worker/model/embedding_mlp.h: 26
// fields of dim 16 over Zipf ids, 13 dense features, bottom 64-16, top
// 128-64-1) at batch 2048, its step including the host's bag index and the
// index upload: "model embedding_mlp ... ms_per_step X".
//
//   gpu_step [--device cuda:0|cpu] [--batch 64] [--steps 200] [--tf32]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tensor/layout.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/backend_bag_index.h"
#include "worker/model/bag_index.h"
#include "worker/model/embedding_mlp.h"
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

double EmbeddingStepMs(fulcrum::Backend* backend, int batch, int steps) {
  const fulcrum::EmbeddingMlpShape shape{.fields = 26, .dense = 13, .dim = 16,
                                         .bottom = {64, 16},
                                         .top = {128, 64}};
  auto layout = fulcrum::ParameterLayout::ForTensors(
      *fulcrum::EmbeddingMlpTensors(shape), 1, 1 << 30);
  if (!layout.ok()) return -1;
  const int64_t total = layout->total_size();
  std::vector<float> params(total);
  fulcrum::InitializeParameters(*layout, 1, 0, total, params.data());
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int bags = batch * shape.fields;
  // Eight batches of ids, used in turn.
  std::vector<std::vector<uint64_t>> ids(8);
  for (auto& b : ids) {
    for (int j = 0; j < bags; ++j)
      b.push_back((uint64_t(j % shape.fields) << 32) |
                  uint64_t(std::pow(1e6, u(rng))));
  }
  std::vector<int32_t> offsets(bags + 1);
  for (int j = 0; j <= bags; ++j) offsets[j] = j;
  std::vector<float> dense(int64_t{batch} * shape.dense), labels(batch);
  for (float& v : dense) v = static_cast<float>(3 * u(rng));
  for (float& v : labels) v = u(rng) < 0.25 ? 1.0f : 0.0f;
  float* p = backend->Allocate(total);
  float* g = backend->Allocate(total);
  float* xd = backend->Allocate(static_cast<int64_t>(dense.size()));
  float* rows = backend->Allocate(int64_t{bags} * shape.dim);
  float* row_grads = backend->Allocate(int64_t{bags} * shape.dim);
  fulcrum::BackendBagIndex index(backend, bags);
  backend->CopyToDevice(params.data(), p, total);
  backend->CopyToDevice(dense.data(), xd, static_cast<int64_t>(dense.size()));
  std::vector<float> values(int64_t{bags} * shape.dim, 0.01f);
  backend->CopyToDevice(values.data(), rows, static_cast<int64_t>(values.size()));
  auto model = fulcrum::EmbeddingMlp::Create(backend, *layout, shape, batch);
  if (!model.ok() || !backend->status().ok()) return -1;
  fulcrum::BagIndexer indexer;
  fulcrum::BagIndex x;
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i) {
      if (!indexer.Build(ids[i % ids.size()], offsets, &x).ok()) return;
      fulcrum::EmbeddingMlp::Batch b;
      index.Place(x, &b);
      b.size = batch;
      b.dense = xd;
      b.labels = labels.data();
      b.row_values = rows;
      (*model)->ForwardBackward(p, b, g, row_grads, [](int64_t) {});
    }
    backend->Synchronize();
  };
  run(10);
  const auto start = std::chrono::steady_clock::now();
  run(steps);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                start)
          .count() /
      steps;
  model->reset();
  for (float* f : {p, g, xd, rows, row_grads}) backend->Free(f);
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
  const int emb_batch = 2048;
  std::printf("model embedding_mlp-26x16-64-16-128-64-1 device %s batch %d "
              "ms_per_step %.4f\n",
              backend->Name().c_str(), emb_batch,
              EmbeddingStepMs(backend.get(), emb_batch,
                              std::max(5, steps / 4)));
  return 0;
}
