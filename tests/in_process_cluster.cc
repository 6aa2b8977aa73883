#include "tests/in_process_cluster.h"

#include <grpcpp/server_builder.h>

#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/config/job_spec.h"
#include "common/net/grpc_options.h"
#include "server/ps/local_channel.h"
#include "worker/backend/cpu_backend.h"
#include "worker/grpc_channel.h"

namespace fulcrum::testing {

std::unique_ptr<ShardServer> StartShard(bool shared_memory,
                                        bool callback_streams) {
  auto s = std::make_unique<ShardServer>();
  s->metrics = std::make_unique<ShardMetrics>(s->registry);
  ParameterServerService::Options options;
  options.step_timeout = absl::Seconds(60);
  options.metrics = s->metrics.get();
  options.shared_memory = shared_memory;
  options.callback_streams = callback_streams;
  s->service = std::make_unique<ParameterServerService>(&s->core, options);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  ConfigureServer(&builder);
  builder.RegisterService(s->service.get());
  s->server = builder.BuildAndStart();
  s->address = "127.0.0.1:" + std::to_string(port);
  return s;
}

std::string TransportName(Transport t) {
  switch (t) {
    case Transport::kGrpc:
      return "grpc";
    case Transport::kShm:
      return "shm";
    case Transport::kLocal:
      return "local";
    case Transport::kCallback:
      return "callback";
    case Transport::kShmCallback:
      return "shm_callback";
  }
  return "?";
}

TrainRun TrainInProcess(
    const v1::JobSpec& job_spec, int workers,
    const std::function<void(int, Trainer::Options*)>& tune,
    const std::function<std::unique_ptr<Backend>()>& make_backend,
    Transport transport, bool shards_map_shm) {
  // No coordinator in process: the deterministic static sharding.
  v1::JobSpec spec = job_spec;
  spec.mutable_dataset()->set_sharding("static");
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::vector<ParameterShard*> cores;
  std::vector<std::string> addresses, ids;
  for (int w = 0; w < workers; ++w) ids.push_back(absl::StrCat("w", w));
  TrainRun run;
  run.results.resize(workers);
  run.errors.resize(workers);
  for (int w = 0; w < workers; ++w) {
    run.backends.push_back(make_backend ? make_backend()
                                        : std::make_unique<CpuBackend>());
  }
  for (int s = 0; s < spec.shards(); ++s) {
    servers.push_back(StartShard(shards_map_shm, CallbackShards(transport)));
    addresses.push_back(servers.back()->address);
    cores.push_back(&servers.back()->core);
    JobInit init{"job", spec, s, spec.shards(), 1, ids};
    absl::StatusOr<std::shared_ptr<JobShard>> job =
        servers.back()->core.InitJob(init);
    if (!job.ok()) {
      run.errors[0] = job.status().ToString();
      return run;
    }
  }
  GrpcChannelFactory tcp_channels(/*shared_memory=*/false);
  GrpcChannelFactory shm_channels(/*shared_memory=*/true);
  LocalChannelFactory local_channels(cores);
  ChannelFactory* channels =
      transport == Transport::kLocal ? static_cast<ChannelFactory*>(&local_channels)
      : SharedMemory(transport)      ? static_cast<ChannelFactory*>(&shm_channels)
                                     : &tcp_channels;
  // wire.pre_reduce: the group's nonce, one per run.
  const std::string group_nonce =
      absl::StrCat("in-process-", getpid(), "-", absl::ToUnixNanos(absl::Now()));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      Trainer::Options options;
      options.worker_id = ids[w];
      options.step_timeout = absl::Seconds(60);
      options.eval_batch = 100;
      if (tune) tune(w, &options);
      Trainer trainer(run.backends[w].get(), channels, options);
      Assignment a{"job", spec, w, workers, 1, addresses};
      if (PreReduce(spec) && workers > 1) {
        // One host: every worker in one group, rank 0 leading.
        for (const std::string& id : ids) a.host_group.push_back({id, {}});
        a.group_nonce = group_nonce;
      }
      absl::StatusOr<TrainResult> r = trainer.Run(a, nullptr);
      if (r.ok()) {
        run.results[w] = std::move(*r);
      } else {
        run.errors[w] = r.status().ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : servers) {
    run.staleness.push_back((*s->core.Find("job"))->clocks().Stats());
    run.shm_mapped += static_cast<int64_t>(
        s->metrics->shm_streams.WithLabels({"mapped"}).Value());
    run.shm_refused += static_cast<int64_t>(
        s->metrics->shm_streams.WithLabels({"refused"}).Value());
    run.group_members += static_cast<int64_t>(
        s->metrics->group_members.WithLabels().Value());
    s->server->Shutdown(std::chrono::system_clock::now());
  }
  return run;
}

}  // namespace fulcrum::testing
