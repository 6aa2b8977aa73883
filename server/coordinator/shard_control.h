// The coordinator's calls into parameter shards, as an interface: gRPC in
// the process (GrpcShardControl, service.h), fakes in tests
// (testing/fake_shards.h). The Coordinator never calls it while holding its
// lock; calls run on its executor.
//
// Thread safety: implementations must be safe to call concurrently.
#ifndef FULCRUM_SERVER_COORDINATOR_SHARD_CONTROL_H_
#define FULCRUM_SERVER_COORDINATOR_SHARD_CONTROL_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "fulcrum/v1/parameter_server.pb.h"

namespace fulcrum {

class ShardControl {
 public:
  virtual ~ShardControl() = default;
  virtual absl::Status InitJob(const std::string& address,
                               const v1::InitJobRequest& request) = 0;
  // Best effort: the job's streams end on that shard.
  virtual void EndJob(const std::string& address,
                      const std::string& job_id) = 0;
  virtual absl::StatusOr<v1::ReconfigureResponse> Reconfigure(
      const std::string& address, const v1::ReconfigureRequest& request) = 0;
  // The current values of the job's partitions on that shard, chunk by
  // chunk; `sink` returning false stops the pull (CANCELLED).
  virtual absl::Status Pull(
      const std::string& address, const v1::PullRequest& request,
      const std::function<bool(const v1::Params&)>& sink) = 0;
  // The job's embedding rows on that shard, page by page (the same
  // contract as Pull).
  virtual absl::Status ExportRows(
      const std::string& address, const v1::ExportRowsRequest& request,
      const std::function<bool(const v1::RowsPage&)>& sink) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_SHARD_CONTROL_H_
