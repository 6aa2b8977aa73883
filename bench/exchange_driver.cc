// One worker of bench/exchange.sh: joins an external-model job of one
// tensor of --floats floats through libfulcrum (the C API, dlopen'ed from
// --lib) and times the exchange alone - every partition's push and the
// wait for the new parameters - for --steps steps after --warmup. Prints
// one line: "median_us p10_us p90_us". With --memcpy_mb it instead prints
// this machine's memcpy bandwidth in GB/s (the same-run yardstick).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "worker/capi/fulcrum.h"

namespace {

std::string Flag(int argc, char** argv, const std::string& name,
                 const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0)
      return argv[i] + prefix.size();
  }
  return fallback;
}

double MemcpyGBps(int64_t mb) {
  const size_t bytes = static_cast<size_t>(mb) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::memcpy(b.data(), a.data(), bytes);  // fault the pages in
  const int reps = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    a[r] = static_cast<char>(r);
    std::memcpy(b.data(), a.data(), bytes);
  }
  const double s = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
  return static_cast<double>(bytes) * reps / s / 1e9;
}

template <typename F>
F Load(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == nullptr) {
    std::fprintf(stderr, "exchange_driver: %s missing in the library\n", name);
    std::exit(2);
  }
  return reinterpret_cast<F>(f);
}

int Fail(const char* what, const fulcrum_error& e) {
  std::fprintf(stderr, "exchange_driver: %s: code %d: %s\n", what, e.code,
               e.message);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t memcpy_mb = std::atoll(Flag(argc, argv, "memcpy_mb", "0").c_str());
  if (memcpy_mb > 0) {
    std::printf("%.2f\n", MemcpyGBps(memcpy_mb));
    return 0;
  }
  const std::string coordinator = Flag(argc, argv, "coordinator", "");
  const std::string job = Flag(argc, argv, "job", "");
  const int64_t floats = std::atoll(Flag(argc, argv, "floats", "262144").c_str());
  const int steps = std::atoi(Flag(argc, argv, "steps", "50").c_str());
  const int warmup = std::atoi(Flag(argc, argv, "warmup", "10").c_str());
  void* lib = dlopen(Flag(argc, argv, "lib", "libfulcrum.so").c_str(),
                     RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "exchange_driver: %s\n", dlerror());
    return 2;
  }
  auto connect = Load<decltype(&fulcrum_connect)>(lib, "fulcrum_connect");
  auto declare = Load<decltype(&fulcrum_declare)>(lib, "fulcrum_declare");
  auto elements = Load<decltype(&fulcrum_num_elements)>(lib, "fulcrum_num_elements");
  auto partitions = Load<decltype(&fulcrum_num_partitions)>(lib, "fulcrum_num_partitions");
  auto join = Load<decltype(&fulcrum_join)>(lib, "fulcrum_join");
  auto push = Load<decltype(&fulcrum_push)>(lib, "fulcrum_push");
  auto wait = Load<decltype(&fulcrum_wait)>(lib, "fulcrum_wait");
  auto finish = Load<decltype(&fulcrum_finish)>(lib, "fulcrum_finish");
  auto close = Load<decltype(&fulcrum_close)>(lib, "fulcrum_close");

  fulcrum_options options{};
  options.coordinator = coordinator.c_str();
  options.job_id = job.c_str();
  options.device = "cpu";
  options.step_timeout_ms = 120000;
  options.rejoin_timeout_ms = 60000;
  options.metrics_port = -1;
  fulcrum_error error{};
  fulcrum_worker* w = connect(&options, &error);
  if (w == nullptr) return Fail("connect", error);
  const char* names[] = {"w"};
  const int64_t shape[] = {floats};
  const int64_t* shapes[] = {shape};
  const int32_t ndims[] = {1};
  if (declare(w, 1, names, shapes, ndims, nullptr, &error) != 0)
    return Fail("declare", error);
  const int64_t n = elements(w);
  const int32_t parts = partitions(w);
  std::vector<float> params(n, 0.0f), grads(n, 1e-6f);
  fulcrum_assignment a{};
  if (join(w, params.data(), 300000, &a, &error) != 0) return Fail("join", error);
  std::vector<double> us;
  // One more step, not timed, whose errors do not count: the first worker
  // to finish ends the job, maybe before another's last wait returned;
  // the barrier of this step means every timed step is done everywhere.
  const int64_t last = a.first_step + warmup + steps;
  for (int64_t step = a.first_step; step <= last; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int32_t id = 0; id < parts; ++id) {
      if (push(w, id, step, 64, grads.data(), 0, -1, 0, 0, &error) != 0) {
        if (step == last) break;
        return Fail("push", error);
      }
    }
    int32_t stop = 0;
    if (wait(w, step + 1, nullptr, nullptr, &stop, &error) != 0) {
      if (step == last) break;
      return Fail("wait", error);
    }
    const double t = std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - t0)
                         .count();
    if (step >= a.first_step + warmup && step < last) us.push_back(t);
  }
  fulcrum_progress progress{};
  progress.step = last + 1;
  finish(w, &progress, nullptr, &error);
  close(w);
  std::sort(us.begin(), us.end());
  std::printf("%.0f %.0f %.0f\n", us[us.size() / 2], us[us.size() / 10],
              us[us.size() * 9 / 10]);
  return 0;
}
