// fulcrum-coordinator: owns jobs, membership and progress.
#include <sys/stat.h>

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "common/metrics/http_server.h"
#include "common/net/allocator.h"
#include "common/net/grpc_options.h"
#include "common/net/port_file.h"
#include "common/net/signals.h"
#include "common/net/transport.h"
#include "common/net/api_token.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port to serve the Coordinator API on");
ABSL_FLAG(
    std::string, port_file, "",
    "if set, write the bound port here once serving (for --listen host:0)");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1",
          "address of the /metrics endpoint (0.0.0.0 in containers)");
ABSL_FLAG(int, metrics_port, 0,
          "port of the /metrics endpoint (0: any free port; -1: off)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the metrics port here once serving");
ABSL_FLAG(int64_t, heartbeat_ms, 1000,
          "heartbeat interval told to workers and shards");
ABSL_FLAG(int64_t, lease_ms, 5000,
          "a member without a heartbeat for this long is lost");
ABSL_FLAG(std::string, state_dir, "",
          "keep the coordinator's state (jobs, generations) here, fsync'd, so "
          "that a restarted coordinator continues running jobs; empty: "
          "in memory only");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this process serves and dials with (TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM authority peers' certificates must chain to (with --tls_cert: "
          "mutual TLS)");
ABSL_FLAG(bool, insecure, false,
          "serve plaintext gRPC on a non-loopback --listen address (a trusted "
          "network only; default: refuse without TLS)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the API token fulcrumctl calls must carry (default: "
          "none needed)");
ABSL_FLAG(std::string, data_root, "/usr/share/datasets",
          "the workers' --data_root: a job whose dataset.dir leads out of it "
          "is refused at submit");
ABSL_FLAG(std::string, checkpoint_root, "/var/lib/fulcrum/checkpoints",
          "the shards' --checkpoint_root: a job whose checkpoint.dir leads "
          "out of it is refused at submit");
ABSL_FLAG(int, keep_ended_jobs, 1000,
          "ended jobs kept for status and export; older ones are forgotten");
ABSL_FLAG(int, max_threads, 256,
          "calls served at once; past it a call is RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, start_grace_ms, 1000,
          "once workers.min are idle, wait this long for up to workers.max");

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
    std::cerr << "fulcrum-coordinator: " << transport.message() << "\n";
    return 2;
  }
  fulcrum::ApiToken token;
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> t =
        fulcrum::ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!t.ok()) {
      std::cerr << "fulcrum-coordinator: " << t.status().message() << "\n";
      return 2;
    }
    token = fulcrum::ApiToken(*t);
  }
  // Members' credentials: kept in the state dir so that a restarted
  // coordinator recognises its members (a random one per process without).
  const std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  if (!state_dir.empty()) mkdir(state_dir.c_str(), 0700);
  absl::StatusOr<fulcrum::MemberSecret> member_secret =
      fulcrum::MemberSecret::LoadOrCreate(state_dir);
  if (!member_secret.ok()) {
    std::cerr << "fulcrum-coordinator: " << member_secret.status() << "\n";
    return 1;
  }
  fulcrum::GrpcShardControl shard_control(&*member_secret);
  fulcrum::Coordinator::Options options;
  options.heartbeat_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_ms));
  options.lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  options.start_grace = absl::Milliseconds(absl::GetFlag(FLAGS_start_grace_ms));
  fulcrum::metrics::Registry registry;
  std::unique_ptr<fulcrum::CoordinatorMetrics> metrics;
  options.on_member_lost = [&metrics](const std::string& role) {
    if (metrics != nullptr) metrics->MemberLost(role);
  };
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.keep_ended_jobs = std::max(1, absl::GetFlag(FLAGS_keep_ended_jobs));
  options.data_root = absl::GetFlag(FLAGS_data_root);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  for (const std::string* root : {&options.data_root, &options.checkpoint_root}) {
    if (root->empty() || (*root)[0] != '/') {
      std::cerr << "fulcrum-coordinator: --data_root and --checkpoint_root "
                   "must be absolute directories, got '"
                << *root << "'\n";
      return 2;
    }
  }
  fulcrum::Coordinator core(options, &shard_control);
  if (absl::Status recovered = core.Recover(); !recovered.ok()) {
    std::cerr << "fulcrum-coordinator: cannot load the state in "
              << options.state_dir << ": " << recovered << "\n";
    return 1;
  }
  metrics = std::make_unique<fulcrum::CoordinatorMetrics>(registry, &core);
  fulcrum::CoordinatorService service(
      &core, token,
      [&metrics] {
        if (metrics != nullptr) metrics->Unauthenticated();
      },
      &*member_secret);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, fulcrum::ServerCredentials(), &port);
  // Every call here is short (unary, bounded work): a bounded pool.
  fulcrum::ConfigureServer(&builder, absl::GetFlag(FLAGS_max_threads));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "fulcrum-coordinator: cannot listen on " << listen << "\n";
    return 1;
  }
  std::cerr << "fulcrum-coordinator: serving on port " << port << " ("
            << fulcrum::DescribeTransport(insecure)
            << (token.enabled() ? "; API token required" : "") << ")\n";
  auto metrics_server = fulcrum::metrics::ServeProcessMetrics(
      "coordinator", absl::GetFlag(FLAGS_metrics_address),
      absl::GetFlag(FLAGS_metrics_port), absl::GetFlag(FLAGS_metrics_port_file),
      &registry, nullptr);
  if (!metrics_server.ok()) {
    std::cerr << "fulcrum-coordinator: " << metrics_server.status().message()
              << "\n";
    return 1;
  }
  core.Start();
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    fulcrum::WritePortFile(absl::GetFlag(FLAGS_port_file), port);
  }
  fulcrum::WaitForTerminationSignal();
  std::cerr << "fulcrum-coordinator: shutting down\n";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  core.Stop();
  return 0;
}
