// Keeps a shard registered with the coordinator: registers (retrying with
// backoff while the coordinator is unreachable), heartbeats within the lease,
// re-registers if the coordinator forgot it, and ends jobs the coordinator no
// longer lists as active.
#ifndef FULCRUM_SERVER_PS_SHARD_AGENT_H_
#define FULCRUM_SERVER_PS_SHARD_AGENT_H_

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "common/net/member_credential.h"
#include "server/ps/parameter_shard.h"

namespace fulcrum {

class ShardAgent {
 public:
  // `shard` is not owned and must outlive the agent.
  // Sync steps waiting longer than `stall_threshold` are logged and reported.
  // `memory_bytes` is declared to the coordinator (0: no limit), which
  // places no more jobs' bytes here.
  ShardAgent(std::string coordinator, std::string advertise_address,
             ParameterShard* shard,
             absl::Duration stall_threshold = absl::Seconds(10),
             int64_t memory_bytes = 0,
             SharedCredential* coordinator_credential = nullptr);
  ~ShardAgent();
  void Start();
  void Stop();  // leaves the coordinator (best effort) and joins the thread
  bool Registered() const { return registered_.load(); }

 private:
  void Run();
  bool Register();
  // Logs each stall once.
  void LogNewStalls(const v1::ShardJobStats& report);

  const std::string advertise_address_;
  const absl::Duration stall_threshold_;
  const int64_t memory_bytes_;
  // Not owned, may be null: where the coordinator's credential (from each
  // registration) goes, for the service's checks.
  SharedCredential* const coordinator_;
  std::string credential_;  // this member's, agent thread (and Stop)
  void Sign(grpc::ClientContext* context) const;
  std::set<std::string>
      logged_stalls_;            // "job/partition/step", agent thread only
  ParameterShard* const shard_;  // Not owned.
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::string shard_id_;
  int64_t interval_ms_ = 1000;
  absl::Notification stop_;
  std::atomic<bool> registered_{false};
  std::thread thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_SHARD_AGENT_H_
