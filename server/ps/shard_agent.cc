#include "server/ps/shard_agent.h"

#include <iostream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/net/grpc_options.h"
#include "common/net/retry.h"
#include "common/status/grpc_status.h"
#include "server/ps/job_report.h"

namespace fulcrum {

ShardAgent::ShardAgent(std::string coordinator, std::string advertise_address,
                       ParameterShard* shard, absl::Duration stall_threshold,
                       int64_t memory_bytes, SharedCredential* coordinator_credential)
    : advertise_address_(std::move(advertise_address)),
      stall_threshold_(stall_threshold),
      memory_bytes_(memory_bytes),
      coordinator_(coordinator_credential),
      shard_(shard),
      stub_(v1::Coordinator::NewStub(MakeChannel(coordinator))) {}

ShardAgent::~ShardAgent() { Stop(); }

void ShardAgent::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ShardAgent::Sign(grpc::ClientContext* context) const {
  if (!credential_.empty()) {
    context->AddMetadata(kMemberMetadataKey,
                         MemberMetadataValue(shard_id_, credential_));
  }
}

void ShardAgent::Stop() {
  if (stop_.HasBeenNotified()) return;
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
  if (!shard_id_.empty()) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(2));
    Sign(&context);
    v1::LeaveRequest request;
    request.set_member_id(shard_id_);
    v1::LeaveResponse response;
    stub_->Leave(&context, request, &response);
  }
}

bool ShardAgent::Register() {
  v1::RegisterShardRequest request;
  request.set_address(advertise_address_);
  request.set_memory_bytes(memory_bytes_);
  v1::RegisterShardResponse response;
  RetryOptions retry;
  retry.retry_all = true;  // keep trying until the coordinator takes us
  absl::Status s = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetTimeout(&context, std::chrono::seconds(5));
        return FromGrpcStatus(
            stub_->RegisterShard(&context, request, &response));
      },
      retry, &stop_,
      [](const absl::Status& failed) {
        std::cerr << "fulcrum-server: register failed (" << failed.message()
                  << "), retrying\n";
      });
  if (!s.ok()) return false;
  shard_id_ = response.shard_id();
  credential_ = response.member_credential();
  if (coordinator_ != nullptr)
    coordinator_->Set(response.coordinator_credential());
  registered_ = true;
  interval_ms_ = std::max<int64_t>(50, response.heartbeat_interval_ms());
  std::cerr << "fulcrum-server: registered as " << shard_id_ << "\n";
  return true;
}

void ShardAgent::LogNewStalls(const v1::ShardJobStats& report) {
  for (const v1::Stall& stall : report.stalls()) {
    const std::string key = absl::StrCat(report.job_id(), "/",
                                         stall.partition(), "/", stall.step());
    if (!logged_stalls_.insert(key).second) continue;
    std::cerr << "fulcrum-server: stall: job " << report.job_id() << " step "
              << stall.step() << " partition " << stall.partition()
              << " has waited " << stall.waited_seconds() << " s for "
              << absl::StrJoin(stall.waiting_for(), ", ") << "\n";
  }
}

void ShardAgent::Run() {
  if (!Register()) return;
  while (
      !stop_.WaitForNotificationWithTimeout(absl::Milliseconds(interval_ms_))) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::milliseconds(
                             std::max<int64_t>(1000, interval_ms_)));
    Sign(&context);
    v1::ShardHeartbeatRequest request;
    request.set_shard_id(shard_id_);
    request.set_address(advertise_address_);
    request.set_memory_bytes(memory_bytes_);
    for (const std::string& job_id : shard_->JobIds()) {
      absl::StatusOr<std::shared_ptr<JobShard>> job = shard_->Find(job_id);
      if (!job.ok()) continue;
      (*job)->ExpireRows();
      v1::ShardJobStats* out = request.add_jobs();
      *out = JobReport(**job, shard_id_, stall_threshold_);
      LogNewStalls(*out);
    }
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
