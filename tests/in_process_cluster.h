// Real parameter shards and real trainers in one process, without a
// coordinator: the test plays the coordinator's part (InitJob on each
// shard, assignments to workers). Over each transport of the data plane:
// gRPC services on 127.0.0.1 (kernel-picked ports) with payloads in the
// messages (TCP) or in shared-memory segments, or the in-process channel
// that calls the shard cores directly.
#ifndef FULCRUM_TESTS_IN_PROCESS_CLUSTER_H_
#define FULCRUM_TESTS_IN_PROCESS_CLUSTER_H_

#include <grpcpp/server.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fulcrum/v1/job.pb.h"
#include "server/ps/parameter_shard.h"
#include "server/ps/service.h"
#include "worker/backend/backend.h"
#include "worker/trainer.h"

namespace fulcrum::testing {

struct ShardServer {
  ParameterShard core;
  metrics::Registry registry;
  std::unique_ptr<ShardMetrics> metrics;  // the service's
  std::unique_ptr<ParameterServerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};
// A parameter shard served over gRPC on 127.0.0.1 (a kernel-picked port);
// shared_memory: whether it maps the segments workers offer;
// callback_streams: Stream served by the callback reactor
// (stream_reactor.h, the default) or a handler thread per stream.
std::unique_ptr<ShardServer> StartShard(bool shared_memory = true,
                                        bool callback_streams = true);

// kGrpc: payloads over TCP (shared memory off); kShm: over shared-memory
// segments, control over gRPC - both to shards serving Stream with a
// handler thread per stream (--stream_service=sync); kLocal: the
// in-process channel; kCallback / kShmCallback: as kGrpc / kShm, to shards
// serving Stream on gRPC's callback API (the default).
enum class Transport { kGrpc, kShm, kLocal, kCallback, kShmCallback };
// Whether the shards serve Stream on the callback API / the workers offer
// shared memory.
inline bool CallbackShards(Transport t) {
  return t == Transport::kCallback || t == Transport::kShmCallback;
}
inline bool SharedMemory(Transport t) {
  return t == Transport::kShm || t == Transport::kShmCallback;
}
std::string TransportName(Transport t);

struct TrainRun {
  std::vector<TrainResult> results;       // by rank
  std::vector<std::unique_ptr<Backend>> backends;  // by rank, after training
  std::vector<StalenessStats> staleness;  // by shard
  std::vector<std::string> errors;        // by rank; empty when it trained fine
  // Streams whose segment the shards mapped / refused (fulcrum_server_
  // shm_streams_total): kShm maps every stream, the others offer none.
  int64_t shm_mapped = 0, shm_refused = 0;
  // Members whose pushes came in another's stream (fulcrum_server_group_
  // members_total; gRPC transports only).
  int64_t group_members = 0;
};

// Starts spec.shards() shards, initialises the job on them and trains it
// with `workers` trainers in threads. `tune(rank, options)` may adjust each
// worker's Trainer::Options (e.g. straggler delays); `make_backend()` gives
// each worker its backend (default: CpuBackend).
TrainRun TrainInProcess(
    const v1::JobSpec& spec, int workers,
    const std::function<void(int, Trainer::Options*)>& tune = nullptr,
    const std::function<std::unique_ptr<Backend>()>& make_backend = nullptr,
    Transport transport = Transport::kGrpc, bool shards_map_shm = true);

}  // namespace fulcrum::testing

#endif  // FULCRUM_TESTS_IN_PROCESS_CLUSTER_H_
