// fulcrum-worker: one model replica on one device.
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/metrics/http_server.h"
#include "common/net/allocator.h"
#include "common/net/signals.h"
#include "common/net/transport.h"
#include "absl/strings/numbers.h"
#include "worker/backend/cpu_backend.h"
#include "worker/backend/cuda_loader.h"
#include "worker/worker_agent.h"
#include "worker/worker_metrics.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator host:port");
ABSL_FLAG(std::string, device, "auto",
          "cpu | cuda | cuda:N | auto (CUDA device 0 if there is one, else the "
          "CPU)");
ABSL_FLAG(bool, tf32, false,
          "CUDA: TF32 tensor-core GEMMs (faster, ~1e-3 relative error)");
ABSL_FLAG(int, threads, 1, "OpenBLAS threads for the CPU backend");
ABSL_FLAG(double, slowdown, 1.0,
          "straggler injection: make every step this many times slower "
          "(tests, benchmarks)");
ABSL_FLAG(
    int, inject_step_delay_ms, 0,
    "straggler injection: sleep this long every step (tests, benchmarks)");
ABSL_FLAG(int, inject_step_jitter_ms, 0,
          "straggler injection: plus a uniform random [0, this) ms every step");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1",
          "address of the /metrics endpoint (0.0.0.0 in containers)");
ABSL_FLAG(int, metrics_port, 0,
          "port of the /metrics endpoint (0: any free port; -1: off)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the metrics port here once serving");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this process presents (mutual TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM authority the servers' certificates must chain to (TLS)");
ABSL_FLAG(std::string, data_root, "/usr/share/datasets",
          "datasets are read under this directory: a job's dataset.dir is "
          "taken from it (relative) or must lie in it (absolute), and may "
          "not lead out of it");
ABSL_FLAG(bool, shared_memory, true,
          "payloads to a shard on this host go through a shared-memory "
          "segment (false: always TCP)");
ABSL_FLAG(int, max_jobs, 0,
          "exit after training this many jobs (0: serve until stopped)");

namespace {

// The backend --device names. "auto": CUDA device 0 when this build has the
// CUDA backend and the machine a device, else the CPU.
absl::StatusOr<std::unique_ptr<fulcrum::Backend>> MakeBackend(
    const std::string& device, int threads, bool tf32) {
  if (device == "cpu")
    return std::unique_ptr<fulcrum::Backend>(new fulcrum::CpuBackend(threads));
  int index = 0;
  const bool cuda = device == "cuda" || device.rfind("cuda:", 0) == 0;
  if (cuda && device.size() > 5 &&
      !absl::SimpleAtoi(device.substr(5), &index)) {
    return absl::InvalidArgumentError("the CUDA device index is not a number");
  }
  if (!cuda && device != "auto") {
    return absl::InvalidArgumentError("must be cpu, cuda, cuda:N or auto");
  }
  if (cuda || fulcrum::CudaDeviceCount() > 0) {
    return fulcrum::CreateCudaBackend(index, tf32);
  }
  return std::unique_ptr<fulcrum::Backend>(new fulcrum::CpuBackend(threads));
}

}  // namespace

int main(int argc, char** argv) {
  fulcrum::TuneAllocatorForLargeMessages();
  fulcrum::BlockTerminationSignals();
  absl::ParseCommandLine(argc, argv);
  if (absl::Status transport = fulcrum::UseTransport(
          {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_tls_ca)});
      !transport.ok()) {
    std::cerr << "fulcrum-worker: " << transport.message() << "\n";
    return 2;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  absl::StatusOr<std::unique_ptr<fulcrum::Backend>> backend_or =
      MakeBackend(device, absl::GetFlag(FLAGS_threads),
                  absl::GetFlag(FLAGS_tf32));
  if (!backend_or.ok()) {
    std::cerr << "fulcrum-worker: --device=" << device << ": "
              << backend_or.status().message() << "\n";
    return 2;
  }
  fulcrum::Backend& backend = **backend_or;
  fulcrum::WorkerAgent::Options options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.device = backend.Name();
  options.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.data_root = absl::GetFlag(FLAGS_data_root);
  if (options.data_root.empty() || options.data_root[0] != '/') {
    std::cerr << "fulcrum-worker: --data_root must be an absolute directory, "
                 "got '"
              << options.data_root << "'\n";
    return 2;
  }
  options.slowdown = absl::GetFlag(FLAGS_slowdown);
  options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  options.step_delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_inject_step_delay_ms));
  options.step_delay_jitter =
      absl::Milliseconds(absl::GetFlag(FLAGS_inject_step_jitter_ms));
  fulcrum::metrics::Registry registry;
  fulcrum::WorkerMetrics metrics(registry);
  options.metrics = &metrics;
  fulcrum::WorkerAgent agent(options, &backend);
  auto metrics_server = fulcrum::metrics::ServeProcessMetrics(
      "worker", absl::GetFlag(FLAGS_metrics_address),
      absl::GetFlag(FLAGS_metrics_port), absl::GetFlag(FLAGS_metrics_port_file),
      &registry, [&agent] { return agent.Registered(); });
  if (!metrics_server.ok()) {
    std::cerr << "fulcrum-worker: " << metrics_server.status().message()
              << "\n";
    return 1;
  }
  std::thread signals([&agent] {
    fulcrum::WaitForTerminationSignal();
    agent.Shutdown();
  });
  signals.detach();
  return agent.Run();
}
