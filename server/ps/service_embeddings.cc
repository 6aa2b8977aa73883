// ParameterServer.SparsePull / SparsePush / ExportRows: translation only
// (the checks and the rows are JobShard's and EmbeddingTables').
#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"
#include "common/tensor/bytes.h"
#include "server/ps/service.h"

namespace fulcrum {

grpc::Status ParameterServerService::SparsePull(
    grpc::ServerContext* context, const v1::SparsePullRequest* request,
    v1::SparsePullResponse* response) {
  absl::Status s = ServeSparsePull(*context, *request, response);
  if (!s.ok()) {
    metrics_->Rejected(absl::AsciiStrToLower(absl::StatusCodeToString(s.code())));
  }
  return ToGrpcStatus(s);
}

grpc::Status ParameterServerService::SparsePush(
    grpc::ServerContext*, const v1::SparsePushRequest* request,
    v1::SparsePushResponse* response) {
  absl::Status s = ServeSparsePush(*request, response);
  if (!s.ok()) {
    metrics_->Rejected(absl::AsciiStrToLower(absl::StatusCodeToString(s.code())));
  }
  return ToGrpcStatus(s);
}

absl::Status ParameterServerService::ServeSparsePull(
    const grpc::ServerContext& context, const v1::SparsePullRequest& r,
    v1::SparsePullResponse* response) {
  RETURN_IF_ERROR(AsWorker(r.job_id(), r.worker_id(), r.credential()));
  ASSIGN_OR_RETURN(std::shared_ptr<JobShard> job, shard_->Find(r.job_id()));
  std::vector<float> rows;
  // A staleness bound may make the pull wait: at most step_timeout, and no
  // longer than the caller waits.
  const absl::Time deadline =
      std::min(absl::Now() + options_.step_timeout,
               absl::FromChrono(context.deadline()));
  RETURN_IF_ERROR(job->PullRows(
      r.worker_id(), r.generation(), r.table(),
      {r.ids().data(), static_cast<size_t>(r.ids_size())}, &rows, r.step(),
      deadline, [&context] { return context.IsCancelled(); }));
  const EmbeddingTable* table = job->embeddings().Find(r.table());
  response->set_dim(table->dim());
  response->mutable_rows()->resize(rows.size() * sizeof(float));
  if (!rows.empty()) {
    std::memcpy(response->mutable_rows()->data(), rows.data(),
                rows.size() * sizeof(float));
  }
  metrics_->ForTable(r.job_id(), table->name()).pulled_rows->Increment(r.ids_size());
  return absl::OkStatus();
}

absl::Status ParameterServerService::ServeSparsePush(
    const v1::SparsePushRequest& r, v1::SparsePushResponse* response) {
  RETURN_IF_ERROR(AsWorker(r.job_id(), r.worker_id(), r.credential()));
  ASSIGN_OR_RETURN(std::shared_ptr<JobShard> job, shard_->Find(r.job_id()));
  RowsPush push;
  push.table = r.table();
  push.generation = r.generation();
  push.step = r.step();
  push.chunk = r.chunk();
  push.chunks = r.chunks();
  push.ids = {r.ids().data(), static_cast<size_t>(r.ids_size())};
  push.gradients = r.gradients().data();
  push.gradient_bytes = r.gradients().size();
  push.counts = {r.counts().data(), static_cast<size_t>(r.counts_size())};
  ASSIGN_OR_RETURN(RowsPushed pushed, job->PushRows(r.worker_id(), push));
  response->set_applied(pushed.applied);
  response->set_pending(pushed.pending);
  response->set_repeat(pushed.repeat);
  if (!pushed.repeat) {
    metrics_->ForTable(r.job_id(), std::string(r.table()))
        .pushed_rows->Increment(r.ids_size());
  }
  return absl::OkStatus();
}

grpc::Status ParameterServerService::ExportRows(
    grpc::ServerContext* context, const v1::ExportRowsRequest* request,
    grpc::ServerWriter<v1::RowsPage>* writer) {
  if (absl::Status s = FromCoordinator(*context); !s.ok())
    return ToGrpcStatus(s);
  absl::StatusOr<std::shared_ptr<JobShard>> found =
      shard_->Find(request->job_id());
  if (!found.ok()) return ToGrpcStatus(found.status());
  const int64_t page_bytes = (*found)->init().spec.chunk_bytes();
  v1::RowsPage page;
  const auto flush = [&]() {
    const bool ok = page.ids().empty() || writer->Write(page);
    page.clear_ids();
    page.clear_values();
    return ok;
  };
  for (const auto& table : (*found)->embeddings().tables()) {
    page.set_table(table->name());
    page.set_dim(table->dim());
    const size_t row_bytes = 8 + sizeof(float) * table->dim();
    for (int s = 0; s < table->stripes(); ++s) {
      // Copied under the stripe's lock, written after it.
      std::string ids, values;
      table->ForEachRowOfStripe(
          s, [&](uint64_t id, const float* v, const float*) {
            AppendRaw(&ids, id);
            AppendRawArray(&values, v, table->dim());
          });
      const size_t rows = ids.size() / 8;
      const size_t per_page =
          std::max<size_t>(1, static_cast<size_t>(page_bytes) / row_bytes);
      for (size_t first = 0; first < rows; first += per_page) {
        const size_t n = std::min(per_page, rows - first);
        // Straight from the stripe's copy into the page (no substring).
        page.mutable_ids()->assign(ids, first * 8, n * 8);
        const size_t vb = sizeof(float) * table->dim();
        page.mutable_values()->assign(values, first * vb, n * vb);
        if (context->IsCancelled() || !flush())
          return grpc::Status(grpc::StatusCode::CANCELLED,
                              "the export's reader went away");
      }
    }
  }
  return grpc::Status::OK;
}

}  // namespace fulcrum
