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

grpc::Status CoordinatorService::RegisterWorker(
    grpc::ServerContext*, const v1::RegisterWorkerRequest* r,
    v1::RegisterWorkerResponse* out) {
  return Reply(core_->RegisterWorker(*r), out);
}

grpc::Status CoordinatorService::WorkerHeartbeat(
    grpc::ServerContext*, const v1::WorkerHeartbeatRequest* r,
    v1::WorkerHeartbeatResponse* out) {
  return Reply(core_->WorkerHeartbeat(*r), out);
}

grpc::Status CoordinatorService::RegisterShard(
    grpc::ServerContext*, const v1::RegisterShardRequest* r,
    v1::RegisterShardResponse* out) {
  return Reply(core_->RegisterShard(*r), out);
}

grpc::Status CoordinatorService::ShardHeartbeat(
    grpc::ServerContext*, const v1::ShardHeartbeatRequest* r,
    v1::ShardHeartbeatResponse* out) {
  return Reply(core_->ShardHeartbeat(*r), out);
}

grpc::Status CoordinatorService::Leave(grpc::ServerContext*,
                                       const v1::LeaveRequest* r,
                                       v1::LeaveResponse*) {
  return ToGrpcStatus(core_->Leave(r->member_id()));
}

grpc::Status CoordinatorService::ReportProgress(
    grpc::ServerContext*, const v1::ReportProgressRequest* r,
    v1::ReportProgressResponse* out) {
  return Reply(core_->ReportProgress(*r), out);
}

grpc::Status CoordinatorService::ListMembers(grpc::ServerContext* context,
                                             const v1::ListMembersRequest*,
                                             v1::ListMembersResponse* out) {
  if (grpc::Status auth = Authorize(*context); !auth.ok()) return auth;
  for (v1::Member& m : core_->ListMembers()) *out->add_members() = std::move(m);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::LeaseChunk(grpc::ServerContext*,
                                            const v1::LeaseChunkRequest* r,
                                            v1::LeaseChunkResponse* out) {
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
    grpc::ServerContext*, const v1::DeclareModelRequest* r,
    v1::DeclareModelResponse* out) {
  return Reply(core_->DeclareModel(*r), out);
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
  v1::InitJobResponse response;
  return FromGrpcStatus(Stub(address)->InitJob(&context, request, &response));
}

void GrpcShardControl::EndJob(const std::string& address,
                              const std::string& job_id) {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(5));
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
  v1::ReconfigureResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(Stub(address)->Reconfigure(&context, request, &response)));
  return response;
}

absl::Status GrpcShardControl::Pull(
    const std::string& address, const v1::PullRequest& request,
    const std::function<bool(const v1::Params&)>& sink) {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(60));
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

}  // namespace fulcrum
