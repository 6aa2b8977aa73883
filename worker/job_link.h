// What a worker's session needs from the control plane, as an interface:
// the coordinator (WorkerAgent, over gRPC) in a worker process; nothing, or a
// fake, in tests.
#ifndef FULCRUM_WORKER_JOB_LINK_H_
#define FULCRUM_WORKER_JOB_LINK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/dataplane/parameter_channel.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "fulcrum/v1/job.pb.h"

namespace fulcrum {

// A worker's place in one generation of a job.
struct Assignment {
  std::string job_id;
  v1::JobSpec spec;
  int rank = 0;
  int world_size = 1;
  int64_t generation = 1;
  std::vector<std::string> shard_addresses;
  // The shards wait for this member's values (an external model's first,
  // or after a membership change in gradient-averaging mode).
  bool initialize = false;
  // By shard index: the credential this worker's hello carries there.
  std::vector<std::string> shard_credentials;
  // wire.pre_reduce: this generation's members on this host, leader first
  // (WorkerAssignment.host_group), and the group's nonce; empty: none.
  std::vector<GroupPeer> host_group;
  std::string group_nonce;
};

// Assignment from the coordinator's message.
Assignment FromProto(const v1::WorkerAssignment& a);

// Thread safety: implementations are called from the training thread while
// their own threads (heartbeats) run; every method must be thread-safe.
class JobLink {
 public:
  virtual ~JobLink() = default;
  // The latest progress, for the coordinator (sent with heartbeats).
  virtual void Update(const v1::Progress& progress) = 0;
  // The worker is leaving the job (shutdown, or the job was cancelled).
  virtual bool Leaving() = 0;
  // The job's assignment at a generation after `generation` (the old one
  // ended: membership changed or the job recovers from a lost shard), or
  // nullopt when the worker no longer has the job or `deadline` passes.
  virtual std::optional<Assignment> NextAssignment(const std::string& job_id,
                                                   int64_t generation,
                                                   absl::Time deadline) = 0;
  // Chunk sharding: reports finished chunks and leases the next one.
  virtual absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest& request) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_JOB_LINK_H_
