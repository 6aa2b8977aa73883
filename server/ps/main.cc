// fulcrum-server: one parameter shard.
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/http_server.h"
#include "common/net/allocator.h"
#include "common/net/grpc_options.h"
#include "common/net/signals.h"
#include "common/net/transport.h"
#include "server/ps/service.h"
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
  fulcrum::ParameterShard shard(checkpoint_root);
  fulcrum::metrics::Registry registry;
  fulcrum::ShardMetrics metrics(registry);
  registry.AddCollector(
      [&] { metrics.jobs.WithLabels().Set(shard.JobIds().size()); });
  fulcrum::ParameterServerService service(
      &shard, {absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s)), &metrics});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, fulcrum::ServerCredentials(), &port);
  fulcrum::ConfigureServer(&builder);
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
      absl::Seconds(absl::GetFlag(FLAGS_stall_threshold_s)));
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
