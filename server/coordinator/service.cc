#include "server/coordinator/service.h"

#include "common/net/grpc_options.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

template <typename T, typename Out>
grpc::Status Reply(absl::StatusOr<T> result, Out* out) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *out = std::move(*result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status CoordinatorService::Authorize(
    const grpc::ServerContext& context) const {
  absl::Status s = token_.Check(TokenMetadata(context));
  if (!s.ok() && on_unauthenticated_) on_unauthenticated_();
  return ToGrpcStatus(s);
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* r,
                                           v1::SubmitJobResponse* out) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  absl::StatusOr<std::string> id = core_->SubmitJob(r->spec());
  if (!id.ok()) return ToGrpcStatus(id.status());
  out->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* r,
                                        v1::JobStatus* out) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  return Reply(core_->GetJob(r->job_id()), out);
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context,
                                          const v1::ListJobsRequest* r,
                                          v1::ListJobsResponse* out) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  return Reply(core_->ListJobs(*r), out);
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* r,
                                           v1::JobStatus* out) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  return Reply(core_->CancelJob(r->job_id()), out);
}

grpc::Status CoordinatorService::AsMember(const grpc::ServerContext& context,
                                          const std::string& role,
                                          const std::string& id) const {
  if (members_ == nullptr) return grpc::Status::OK;
  const auto& md = context.client_metadata();
  auto it = md.find(kMemberMetadataKey);
  if (it == md.end()) {
    if (on_unauthenticated_) on_unauthenticated_();
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat(kMemberMetadataKey,
                                     ": missing member credential (a ", role,
                                     " sends the one its registration gave)"));
  }
  std::optional<MemberClaim> claim = ParseMemberMetadata(
      std::string_view(it->second.data(), it->second.size()));
  if (!claim.has_value() || claim->id != id ||
      !members_->Check(absl::StrCat(role, "/", id), claim->credential)) {
    if (on_unauthenticated_) on_unauthenticated_();
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(role, " '", id.substr(0, 64),
                     "': the call's member credential is not this member's"));
  }
  return grpc::Status::OK;
}

void AddShardCredentials(const MemberSecret* members, const std::string& worker,
                         v1::WorkerAssignment* a) {
  if (a->host_group_size() > 0) {
    // One nonce per group and generation, secret where members are
    // checked (derived from the coordinator's key, like the credentials).
    const std::string group = absl::StrCat(
        "group/", a->job_id(), "/", a->generation(), "/",
        a->host_group(0).worker_id());
    a->set_group_nonce(members == nullptr ? group
                                           : members->Credential(group));
  }
  if (members == nullptr) return;
  const bool leader =
      a->host_group_size() > 0 && a->host_group(0).worker_id() == worker;
  for (const std::string& address : a->shard_addresses()) {
    const std::string key =
        members->Credential(absl::StrCat("coordinator@", address));
    a->add_shard_credentials(StreamCredential(key, a->job_id(), worker));
    if (!leader) continue;
    for (v1::HostPeer& peer : *a->mutable_host_group()) {
      peer.add_shard_credentials(
          StreamCredential(key, a->job_id(), peer.worker_id()));
    }
  }
}

grpc::Status CoordinatorService::RegisterWorker(
    grpc::ServerContext*, const v1::RegisterWorkerRequest* r,
    v1::RegisterWorkerResponse* out) {
  grpc::Status s = Reply(core_->RegisterWorker(*r), out);
  if (s.ok() && members_ != nullptr) {
    out->set_member_credential(
        members_->Credential(absl::StrCat("worker/", out->worker_id())));
  }
  return s;
}

grpc::Status CoordinatorService::WorkerHeartbeat(
    grpc::ServerContext* context, const v1::WorkerHeartbeatRequest* r,
    v1::WorkerHeartbeatResponse* out) {
  if (grpc::Status auth = AsMember(*context, "worker", r->worker_id());
      !auth.ok())
    return auth;
  grpc::Status s = Reply(core_->WorkerHeartbeat(*r), out);
  if (s.ok() && out->has_assignment())
    AddShardCredentials(members_, r->worker_id(), out->mutable_assignment());
  return s;
}

grpc::Status CoordinatorService::RegisterShard(
    grpc::ServerContext*, const v1::RegisterShardRequest* r,
    v1::RegisterShardResponse* out) {
  grpc::Status s = Reply(core_->RegisterShard(*r), out);
  if (s.ok() && members_ != nullptr) {
    out->set_member_credential(
        members_->Credential(absl::StrCat("shard/", out->shard_id())));
    out->set_coordinator_credential(
        members_->Credential(absl::StrCat("coordinator@", r->address())));
  }
  return s;
}

grpc::Status CoordinatorService::ShardHeartbeat(
    grpc::ServerContext* context, const v1::ShardHeartbeatRequest* r,
    v1::ShardHeartbeatResponse* out) {
  if (grpc::Status auth = AsMember(*context, "shard", r->shard_id());
      !auth.ok())
    return auth;
  return Reply(core_->ShardHeartbeat(*r), out);
}

grpc::Status CoordinatorService::Leave(grpc::ServerContext* context,
                                       const v1::LeaveRequest* r,
                                       v1::LeaveResponse*) {
  const std::string role =
      r->member_id().rfind("s-", 0) == 0 ? "shard" : "worker";
  if (grpc::Status auth = AsMember(*context, role, r->member_id()); !auth.ok())
    return auth;
  return ToGrpcStatus(core_->Leave(r->member_id()));
}

grpc::Status CoordinatorService::ReportProgress(
    grpc::ServerContext* context, const v1::ReportProgressRequest* r,
    v1::ReportProgressResponse* out) {
  if (grpc::Status auth = AsMember(*context, "worker", r->worker_id());
      !auth.ok())
    return auth;
  return Reply(core_->ReportProgress(*r), out);
}

grpc::Status CoordinatorService::ListMembers(grpc::ServerContext* context,
                                             const v1::ListMembersRequest*,
                                             v1::ListMembersResponse* out) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  for (v1::Member& m : core_->ListMembers()) *out->add_members() = std::move(m);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::LeaseChunk(grpc::ServerContext* context,
                                            const v1::LeaseChunkRequest* r,
                                            v1::LeaseChunkResponse* out) {
  if (grpc::Status auth = AsMember(*context, "worker", r->worker_id());
      !auth.ok())
    return auth;
  return Reply(core_->LeaseChunk(*r), out);
}

grpc::Status CoordinatorService::ExportJob(
    grpc::ServerContext* context, const v1::ExportJobRequest* r,
    grpc::ServerWriter<v1::ExportChunk>* writer) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  return ToGrpcStatus(core_->ExportJob(
      r->job_id(),
      [writer](const v1::ExportChunk& chunk) { return writer->Write(chunk); }));
}

grpc::Status CoordinatorService::DeclareModel(
    grpc::ServerContext* context, const v1::DeclareModelRequest* r,
    v1::DeclareModelResponse* out) {
  if (grpc::Status auth = AsMember(*context, "worker", r->worker_id());
      !auth.ok())
    return auth;
  return Reply(core_->DeclareModel(*r), out);
}

void GrpcShardControl::Sign(grpc::ClientContext* context,
                            const std::string& address) const {
  if (members_ == nullptr) return;
  context->AddMetadata(
      kCoordinatorMetadataKey,
      members_->Credential(absl::StrCat("coordinator@", address)));
}

v1::ParameterServer::Stub* GrpcShardControl::Stub(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = stubs_[address];
  if (stub == nullptr)
    stub = v1::ParameterServer::NewStub(MakeChannel(address));
  return stub.get();
}

absl::Status GrpcShardControl::InitJob(const std::string& address,
                                       const v1::InitJobRequest& request) {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(30));
  Sign(&context, address);
  v1::InitJobResponse response;
  return FromGrpcStatus(Stub(address)->InitJob(&context, request, &response));
}

void GrpcShardControl::EndJob(const std::string& address,
                              const std::string& job_id) {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(5));
  Sign(&context, address);
  v1::EndJobRequest request;
  request.set_job_id(job_id);
  v1::EndJobResponse response;
  Stub(address)->EndJob(&context, request, &response);  // best effort
}

absl::StatusOr<v1::ReconfigureResponse> GrpcShardControl::Reconfigure(
    const std::string& address, const v1::ReconfigureRequest& request) {
  grpc::ClientContext context;
  // Restoring a checkpoint reads the shard's files: allow for large models.
  SetTimeout(&context, std::chrono::seconds(60));
  Sign(&context, address);
  v1::ReconfigureResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(Stub(address)->Reconfigure(&context, request, &response)));
  return response;
}

absl::Status GrpcShardControl::Pull(
    const std::string& address, const v1::PullRequest& request,
    const std::function<bool(const v1::Params&)>& sink) {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(60));
  Sign(&context, address);
  auto reader = Stub(address)->Pull(&context, request);
  v1::Params p;
  while (reader->Read(&p)) {
    if (!sink(p)) {
      context.TryCancel();
      reader->Finish().IgnoreError();
      return absl::CancelledError("the export's reader went away");
    }
  }
  return FromGrpcStatus(reader->Finish());
}

absl::Status GrpcShardControl::ExportRows(
    const std::string& address, const v1::ExportRowsRequest& request,
    const std::function<bool(const v1::RowsPage&)>& sink) {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(300));
  Sign(&context, address);
  auto reader = Stub(address)->ExportRows(&context, request);
  v1::RowsPage page;
  while (reader->Read(&page)) {
    if (!sink(page)) {
      context.TryCancel();
      reader->Finish().IgnoreError();
      return absl::CancelledError("the export's reader went away");
    }
  }
  return FromGrpcStatus(reader->Finish());
}

}  // namespace fulcrum
