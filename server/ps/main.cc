// fulcrum-server: one parameter shard.
#include <unistd.h>

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/http_server.h"
#include "common/net/allocator.h"
#include "common/net/grpc_options.h"
#include "common/net/signals.h"
#include "common/net/transport.h"
#include "common/dataplane/shm_segment.h"
#include "server/ps/service.h"
#include "server/ps/shard_collector.h"
#include "server/ps/shard_agent.h"
#include "server/ps/parameter_shard.h"
#include "server/ps/shard_metrics.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "host:port for the data plane (port 0: pick one)");
ABSL_FLAG(
    std::string, advertise, "",
    "address workers dial (default: the listen host with the bound port)");
ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "coordinator host:port");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1",
          "address of the /metrics endpoint (0.0.0.0 in containers)");
ABSL_FLAG(int, metrics_port, 0,
          "port of the /metrics endpoint (0: any free port; -1: off)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the metrics port here once serving");
ABSL_FLAG(
    int64_t, stall_threshold_s, 10,
    "log and report a sync step that waits longer than this for some workers");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this process serves and dials with (TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM authority peers' certificates must chain to (with --tls_cert: "
          "mutual TLS)");
ABSL_FLAG(bool, insecure, false,
          "serve plaintext gRPC on a non-loopback --listen address (a trusted "
          "network only; default: refuse without TLS)");
ABSL_FLAG(int64_t, step_timeout_s, 300,
          "longest a step waits for the other workers");
ABSL_FLAG(int, max_streams, 1024,
          "worker streams served at once; one more is RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, hello_timeout_ms, 10000,
          "a stream that sends no hello within this long is closed");
ABSL_FLAG(int64_t, idle_timeout_s, 600,
          "a stream that sends nothing for this long (between its steps) is "
          "closed");
ABSL_FLAG(int64_t, memory_bytes, -1,
          "bytes this shard may hold for jobs, declared to the coordinator, "
          "which places no more here; -1: 80% of the machine's memory; 0: no "
          "limit");
ABSL_FLAG(bool, shared_memory, true,
          "map the shared-memory segment a worker on this host offers, so "
          "that its payloads skip TCP (false: every stream on TCP)");
ABSL_FLAG(std::string, stream_service, "callback",
          "how the data-plane streams are served: callback (gRPC's callback "
          "API: no thread per TCP stream; a thread per stream on message "
          "rings) or sync (a gRPC handler thread per stream); "
          "docs/benchmarks.md compares them");
ABSL_FLAG(std::string, checkpoint_root, "/var/lib/fulcrum/checkpoints",
          "checkpoint files go under this directory: a job's checkpoint.dir "
          "is taken from it (relative) or must lie in it (absolute), and may "
          "not lead out of it");

int main(int argc, char** argv) {
  fulcrum::TuneAllocatorForLargeMessages();
  fulcrum::BlockTerminationSignals();
  absl::ParseCommandLine(argc, argv);
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (absl::Status transport = fulcrum::UseServingTransport(
          {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_tls_ca)},
          listen, insecure);
      !transport.ok()) {
    std::cerr << "fulcrum-server: " << transport.message() << "\n";
    return 2;
  }
  const std::string checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  if (checkpoint_root.empty() || checkpoint_root[0] != '/') {
    std::cerr << "fulcrum-server: --checkpoint_root must be an absolute "
                 "directory, got '"
              << checkpoint_root << "'\n";
    return 2;
  }
  int64_t memory_bytes = absl::GetFlag(FLAGS_memory_bytes);
  if (memory_bytes < 0) {
    memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
                   sysconf(_SC_PAGESIZE) / 10 * 8;
  }
  fulcrum::ParameterShard shard(checkpoint_root);
  fulcrum::metrics::Registry registry;
  fulcrum::ShardMetrics metrics(registry);
  registry.AddCollector([&] { fulcrum::CollectShardState(shard, &metrics); });
  // Learned when the shard registers; the service checks the coordinator's
  // calls and the workers' hellos with it.
  fulcrum::SharedCredential coordinator_credential;
  fulcrum::ParameterServerService::Options service_options;
  service_options.coordinator = &coordinator_credential;
  service_options.step_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s));
  service_options.metrics = &metrics;
  service_options.max_streams = std::max(1, absl::GetFlag(FLAGS_max_streams));
  service_options.hello_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_hello_timeout_ms));
  service_options.idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_idle_timeout_s));
  service_options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  const std::string stream_service = absl::GetFlag(FLAGS_stream_service);
  if (stream_service != "sync" && stream_service != "callback") {
    std::cerr << "fulcrum-server: --stream_service must be sync or callback, "
                 "got '"
              << stream_service << "'\n";
    return 2;
  }
  service_options.callback_streams = stream_service == "callback";
  // Segments whose worker was killed before any shard mapped them.
  if (service_options.shared_memory) fulcrum::ShmSegment::SweepStale();
  fulcrum::ParameterServerService service(&shard, service_options);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, fulcrum::ServerCredentials(), &port);
  // Streams, plus room for the coordinator's calls and pulls.
  fulcrum::ConfigureServer(&builder, service_options.max_streams + 64);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "fulcrum-server: cannot listen on " << listen << "\n";
    return 1;
  }
  std::string advertise = absl::GetFlag(FLAGS_advertise);
  if (advertise.empty())
    advertise = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  std::cerr << "fulcrum-server: serving on " << advertise << " ("
            << fulcrum::DescribeTransport(insecure) << ")\n";
  fulcrum::ShardAgent agent(
      absl::GetFlag(FLAGS_coordinator), advertise, &shard,
      absl::Seconds(absl::GetFlag(FLAGS_stall_threshold_s)), memory_bytes,
      &coordinator_credential);
  auto metrics_server = fulcrum::metrics::ServeProcessMetrics(
      "server", absl::GetFlag(FLAGS_metrics_address),
      absl::GetFlag(FLAGS_metrics_port), absl::GetFlag(FLAGS_metrics_port_file),
      &registry, [&agent] { return agent.Registered(); });
  if (!metrics_server.ok()) {
    std::cerr << "fulcrum-server: " << metrics_server.status().message()
              << "\n";
    return 1;
  }
  agent.Start();
  fulcrum::WaitForTerminationSignal();
  std::cerr << "fulcrum-server: shutting down\n";
  agent.Stop();
  for (const std::string& job : shard.JobIds()) shard.EndJob(job);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Finish queued checkpoint writes while the metrics they report to exist.
  for (const std::string& job : shard.JobIds()) shard.ForgetJob(job);
  return 0;
}
