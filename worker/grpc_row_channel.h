// RowChannel over gRPC: ParameterServer.SparsePull / SparsePush to the
// generation's shards, asynchronous (gRPC's callback API), one channel per
// shard made once. Requests carry the worker's stream credential for that
// shard and the call's deadline.
//
// Thread safety: as RowChannel.
#ifndef FULCRUM_WORKER_GRPC_ROW_CHANNEL_H_
#define FULCRUM_WORKER_GRPC_ROW_CHANNEL_H_

#include <memory>
#include <vector>

#include "common/dataplane/parameter_channel.h"
#include "common/dataplane/row_channel.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"

namespace fulcrum {

class GrpcRowChannel : public RowChannel {
 public:
  // job_id, worker_id, generation, shard_addresses and shard_credentials
  // of `options` are used.
  explicit GrpcRowChannel(const ChannelOptions& options);

  void Pull(const RowPullCall& call,
            std::function<void(absl::Status)> done) override;
  void Push(const RowPushCall& call,
            std::function<void(absl::Status)> done) override;

 private:
  template <typename Request>
  void Identify(int shard, Request* r) const;

  const ChannelOptions options_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_GRPC_ROW_CHANNEL_H_
