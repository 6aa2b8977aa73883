#include "server/ps/shard_agent.h"

#include <iostream>
#include <random>
#include <set>

#include "common/net/grpc_options.h"

namespace fulcrum {

ShardAgent::ShardAgent(std::string coordinator, std::string advertise_address,
                       ParameterShard* shard)
    : advertise_address_(std::move(advertise_address)),
      shard_(shard),
      stub_(v1::Coordinator::NewStub(MakeChannel(coordinator))) {}

ShardAgent::~ShardAgent() { Stop(); }

void ShardAgent::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ShardAgent::Stop() {
  if (stop_.HasBeenNotified()) return;
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
  if (!shard_id_.empty()) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(2));
    v1::LeaveRequest request;
    request.set_member_id(shard_id_);
    v1::LeaveResponse response;
    stub_->Leave(&context, request, &response);
  }
}

bool ShardAgent::Register() {
  std::mt19937_64 rng(std::random_device{}());
  for (int attempt = 0; !stop_.HasBeenNotified(); ++attempt) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(5));
    v1::RegisterShardRequest request;
    request.set_address(advertise_address_);
    v1::RegisterShardResponse response;
    grpc::Status s = stub_->RegisterShard(&context, request, &response);
    if (s.ok()) {
      shard_id_ = response.shard_id();
      interval_ms_ = std::max<int64_t>(50, response.heartbeat_interval_ms());
      std::cerr << "fulcrum-server: registered as " << shard_id_ << "\n";
      return true;
    }
    std::cerr << "fulcrum-server: register failed (" << s.error_message()
              << "), retrying\n";
    const auto wait = Backoff(attempt, std::chrono::milliseconds(100),
                              std::chrono::milliseconds(2000), rng());
    if (stop_.WaitForNotificationWithTimeout(absl::FromChrono(wait)))
      return false;
  }
  return false;
}

void ShardAgent::Run() {
  if (!Register()) return;
  while (
      !stop_.WaitForNotificationWithTimeout(absl::Milliseconds(interval_ms_))) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::milliseconds(
                             std::max<int64_t>(1000, interval_ms_)));
    v1::ShardHeartbeatRequest request;
    request.set_shard_id(shard_id_);
    v1::ShardHeartbeatResponse response;
    grpc::Status s = stub_->ShardHeartbeat(&context, request, &response);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      if (!Register()) return;
      continue;
    }
    if (!s.ok()) continue;  // coordinator unreachable: keep serving, retry
    const std::set<std::string> active(response.active_jobs().begin(),
                                       response.active_jobs().end());
    for (const std::string& job : shard_->JobIds()) {
      if (!active.count(job)) shard_->EndJob(job);
    }
  }
}

}  // namespace fulcrum
