// gRPC front of the coordinator: translation only (requests to the core,
// statuses back; the API token of the user-facing calls), and ShardControl
// over gRPC.
#ifndef FULCRUM_SERVER_COORDINATOR_SERVICE_H_
#define FULCRUM_SERVER_COORDINATOR_SERVICE_H_

#include <functional>
#include <map>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "common/net/api_token.h"
#include "common/net/member_credential.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/shard_control.h"

namespace fulcrum {

// Adds the shards' credentials for `worker` to its assignment (and, to a
// host group's leader's, its peers'), and the group's nonce: derived from
// `members`' secret, so that only the coordinator can make them; `members`
// null (tests, nothing checked): no credentials, a nonce that is not secret.
void AddShardCredentials(const MemberSecret* members, const std::string& worker,
                         v1::WorkerAssignment* a);

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `core` is not owned and must outlive the service. The user-facing calls
  // (SubmitJob, GetJob, ListJobs, CancelJob, ListMembers) need `token` when
  // it is enabled; the processes' calls rely on mutual TLS.
  // `on_unauthenticated` (may be empty) hears of every call the token
  // refused.
  // `members` (not owned; may be null: nothing checked, tests) issues each
  // member a credential at registration and checks it on every call made
  // as that member (member_credential.h): UNAUTHENTICATED without one,
  // PERMISSION_DENIED with another member's, nothing changed.
  explicit CoordinatorService(
      Coordinator* core, ApiToken token = ApiToken(),
      std::function<void()> on_unauthenticated = nullptr,
      const MemberSecret* members = nullptr)
      : core_(core),
        token_(std::move(token)),
        on_unauthenticated_(std::move(on_unauthenticated)),
        members_(members) {}

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                         v1::SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*,
                      v1::JobStatus*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*,
                         v1::JobStatus*) override;
  grpc::Status RegisterWorker(grpc::ServerContext*,
                              const v1::RegisterWorkerRequest*,
                              v1::RegisterWorkerResponse*) override;
  grpc::Status WorkerHeartbeat(grpc::ServerContext*,
                               const v1::WorkerHeartbeatRequest*,
                               v1::WorkerHeartbeatResponse*) override;
  grpc::Status RegisterShard(grpc::ServerContext*,
                             const v1::RegisterShardRequest*,
                             v1::RegisterShardResponse*) override;
  grpc::Status ShardHeartbeat(grpc::ServerContext*,
                              const v1::ShardHeartbeatRequest*,
                              v1::ShardHeartbeatResponse*) override;
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*,
                     v1::LeaveResponse*) override;
  grpc::Status ReportProgress(grpc::ServerContext*,
                              const v1::ReportProgressRequest*,
                              v1::ReportProgressResponse*) override;
  grpc::Status ListMembers(grpc::ServerContext*, const v1::ListMembersRequest*,
                           v1::ListMembersResponse*) override;
  grpc::Status LeaseChunk(grpc::ServerContext*, const v1::LeaseChunkRequest*,
                          v1::LeaseChunkResponse*) override;
  grpc::Status ExportJob(grpc::ServerContext*, const v1::ExportJobRequest*,
                         grpc::ServerWriter<v1::ExportChunk>*) override;
  grpc::Status DeclareModel(grpc::ServerContext*,
                            const v1::DeclareModelRequest*,
                            v1::DeclareModelResponse*) override;

 private:
  grpc::Status Authorize(const grpc::ServerContext& context) const;
  // The call is made by member `id` of `role` ("worker" or "shard").
  grpc::Status AsMember(const grpc::ServerContext& context,
                        const std::string& role, const std::string& id) const;

  Coordinator* const core_;  // Not owned.
  const ApiToken token_;
  const std::function<void()> on_unauthenticated_;
  const MemberSecret* const members_;  // Not owned; may be null.
};

// ShardControl over gRPC, one cached channel per shard address.
// Every call carries the coordinator's credential for that shard (from
// `members`, not owned; null: none).
class GrpcShardControl final : public ShardControl {
 public:
  explicit GrpcShardControl(const MemberSecret* members = nullptr)
      : members_(members) {}
  absl::Status InitJob(const std::string& address,
                       const v1::InitJobRequest& request) override;
  void EndJob(const std::string& address, const std::string& job_id) override;
  absl::StatusOr<v1::ReconfigureResponse> Reconfigure(
      const std::string& address,
      const v1::ReconfigureRequest& request) override;
  absl::Status Pull(
      const std::string& address, const v1::PullRequest& request,
      const std::function<bool(const v1::Params&)>& sink) override;
  absl::Status ExportRows(
      const std::string& address, const v1::ExportRowsRequest& request,
      const std::function<bool(const v1::RowsPage&)>& sink) override;

 private:
  v1::ParameterServer::Stub* Stub(const std::string& address);
  void Sign(grpc::ClientContext* context, const std::string& address) const;
  const MemberSecret* const members_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<v1::ParameterServer::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_SERVICE_H_
