// A ShardControl whose shards accept every InitJob and Reconfigure and do
// nothing: for tests of the coordinator's gRPC front that need no shard.
#ifndef FULCRUM_TESTS_NO_SHARDS_H_
#define FULCRUM_TESTS_NO_SHARDS_H_

#include <string>

#include "server/coordinator/coordinator_core.h"

namespace fulcrum::testing {

class NoShards : public ShardControl {
 public:
  absl::Status InitJob(const std::string&, const v1::InitJobRequest&) override {
    return absl::OkStatus();
  }
  void EndJob(const std::string&, const std::string&) override {}
  absl::StatusOr<v1::ReconfigureResponse> Reconfigure(
      const std::string&, const v1::ReconfigureRequest&) override {
    return v1::ReconfigureResponse();
  }
};

}  // namespace fulcrum::testing

#endif  // FULCRUM_TESTS_NO_SHARDS_H_
