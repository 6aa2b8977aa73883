// The data plane in process (a ParameterChannel): a worker's pushes go
// straight into the shard cores' WorkerStreams, and parameters are written
// by the shard straight into the worker's buffer. One thread per shard plays
// the part of the gRPC stream's handler (a read blocks it until the step is
// aggregated). Used to test the worker side - trainer, session, device path
// - without a network, and to compare transports.
//
// Thread safety: as ParameterChannel.
#ifndef FULCRUM_SERVER_PS_LOCAL_CHANNEL_H_
#define FULCRUM_SERVER_PS_LOCAL_CHANNEL_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/dataplane/arrivals.h"
#include "common/dataplane/parameter_channel.h"
#include "server/ps/local_row_channel.h"
#include "server/ps/parameter_shard.h"

namespace fulcrum {

class LocalParameterChannel : public ParameterChannel {
 public:
  // `shards` (by shard index), `layout` and `params` are not owned and must
  // outlive the channel.
  LocalParameterChannel(ChannelOptions options,
                        std::vector<ParameterShard*> shards,
                        const ParameterLayout* layout, float* params);
  ~LocalParameterChannel() override;

  absl::Status Initialize(const float* values) override;
  absl::StatusOr<int64_t> Open() override;
  void Push(int32_t id, int64_t step, int64_t samples, const float* grads,
            bool stop, PushRange range) override;
  void PushShares(int32_t id, int64_t step, int64_t samples,
                  const float* grads, bool stop,
                  absl::Span<const MemberShare> shares) override;
  absl::Status WaitForClock(int64_t clock, absl::Time deadline, bool* stop,
                            absl::FunctionRef<void(int32_t)> arrived) override;
  void Cancel() override;
  absl::Status Close() override;

 private:
  // Queues a push for its partition's stream (Push and PushShares).
  void Enqueue(const QueuedPush& push);
  struct Link;
  void Serve(Link* link);

  const ChannelOptions options_;
  const std::vector<ParameterShard*> shards_;
  const ParameterLayout* const layout_;  // Not owned.
  float* const params_;                  // Not owned.
  Arrivals arrivals_;
  // options_.encoder, or own_encoder_ (dense) when there is none.
  // own_encoder_ stays declared before encoder_ (ChannelEncoder fills it).
  std::unique_ptr<GradientEncoder> own_encoder_;
  GradientEncoder* const encoder_;
  std::vector<std::unique_ptr<Link>> links_;  // shards holding partitions
  std::vector<int> link_of_partition_;
};

// Makes LocalParameterChannels to `shards` (by shard index, not owned).
class LocalChannelFactory : public ChannelFactory {
 public:
  explicit LocalChannelFactory(std::vector<ParameterShard*> shards)
      : shards_(std::move(shards)) {}
  std::unique_ptr<ParameterChannel> Create(ChannelOptions options,
                                           const ParameterLayout* layout,
                                           float* params) override {
    return std::make_unique<LocalParameterChannel>(std::move(options), shards_,
                                                   layout, params);
  }
  absl::StatusOr<std::unique_ptr<RowChannel>> CreateRows(
      const ChannelOptions& options) override {
    return std::unique_ptr<RowChannel>(new LocalRowChannel(options, shards_));
  }

 private:
  const std::vector<ParameterShard*> shards_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_LOCAL_CHANNEL_H_
