// RowChannel in process (tests): a call goes straight to the shard core's
// JobShard::PullRows / PushRows as the gRPC service would make it, and
// `done` runs inline.
//
// Thread safety: as RowChannel.
#ifndef FULCRUM_SERVER_PS_LOCAL_ROW_CHANNEL_H_
#define FULCRUM_SERVER_PS_LOCAL_ROW_CHANNEL_H_

#include <string>
#include <vector>

#include "common/dataplane/parameter_channel.h"
#include "common/dataplane/row_channel.h"
#include "server/ps/parameter_shard.h"

namespace fulcrum {

class LocalRowChannel : public RowChannel {
 public:
  // `shards` (by shard index) are not owned and must outlive the channel.
  LocalRowChannel(const ChannelOptions& options,
                  std::vector<ParameterShard*> shards)
      : options_(options), shards_(std::move(shards)) {}

  void Pull(const RowPullCall& call,
            std::function<void(absl::Status)> done) override;
  void Push(const RowPushCall& call,
            std::function<void(absl::Status)> done) override;

 private:
  absl::StatusOr<std::shared_ptr<JobShard>> Job(int shard) const;

  const ChannelOptions options_;
  const std::vector<ParameterShard*> shards_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_LOCAL_ROW_CHANNEL_H_
