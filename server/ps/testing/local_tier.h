// A parameter-server tier in process for tests of the worker side: one
// shard core per shard index with the job initialised, the in-process
// channel to them (local_channel.h), and the coordinator's generation round
// played by the test. testonly, and the only way worker tests reach shard
// code: production workers reach shards through proto/ alone.
#ifndef FULCRUM_SERVER_PS_TESTING_LOCAL_TIER_H_
#define FULCRUM_SERVER_PS_TESTING_LOCAL_TIER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dataplane/parameter_channel.h"
#include "common/dataplane/row_channel.h"
#include "fulcrum/v1/job.pb.h"

namespace fulcrum {

class ParameterShard;
class LocalChannelFactory;

namespace testing {

class LocalTier {
 public:
  // Initialises job `job_id` of `spec` (defaults applied) on spec.shards()
  // shard cores at generation 1 with `workers`. status() says if that
  // failed.
  LocalTier(const std::string& job_id, const v1::JobSpec& spec,
            std::vector<std::string> workers);
  ~LocalTier();
  absl::Status status() const { return status_; }

  // Channels into the shard cores (owned by the tier).
  ChannelFactory* channels();
  // A channel for embedding rows as member `options.worker_id` of
  // options.generation (job_id is the tier's).
  std::unique_ptr<RowChannel> Rows(ChannelOptions options);

  // The coordinator's round: every shard adopts `generation` with
  // `workers`, then aligns to the lowest version any reported. Returns it.
  absl::StatusOr<int64_t> Reconfigure(int64_t generation,
                                      const std::vector<std::string>& workers);

 private:
  const std::string job_id_;
  std::vector<std::unique_ptr<ParameterShard>> shards_;
  std::unique_ptr<LocalChannelFactory> channels_;
  absl::Status status_;
};

}  // namespace testing
}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_TESTING_LOCAL_TIER_H_
