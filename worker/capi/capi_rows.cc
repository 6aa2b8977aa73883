// libfulcrum's embedding rows (fulcrum.h, version 3): a RowClient over
// gRPC for the session's generation.
#include "absl/strings/str_cat.h"
#include "worker/capi/worker_handle.h"

namespace {

using fulcrum::capi::Fail;

// The client of the session's current generation, made at its first use.
absl::StatusOr<fulcrum::RowClient*> Rows(fulcrum_worker* w) {
  if (w->session == nullptr)
    return absl::FailedPreconditionError("join first");
  const fulcrum::Assignment& a = w->session->assignment();
  if (w->rows == nullptr || w->rows_generation != a.generation) {
    fulcrum::ChannelOptions o;
    o.job_id = a.job_id;
    o.worker_id = w->link->worker_id();
    o.generation = a.generation;
    o.shard_addresses = a.shard_addresses;
    o.shard_credentials = a.shard_credentials;
    w->rows.reset();
    w->row_channel = std::make_unique<fulcrum::GrpcRowChannel>(o);
    fulcrum::RowClient::Options ro;
    ro.shards = static_cast<int>(a.shard_addresses.size());
    ro.chunk_bytes = a.spec.chunk_bytes();
    ro.timeout = w->step_timeout;
    w->rows = std::make_unique<fulcrum::RowClient>(w->row_channel.get(), ro);
    w->rows_generation = a.generation;
  }
  return w->rows.get();
}

int32_t Dim(const fulcrum_worker* w, const char* table) {
  if (w->session == nullptr || table == nullptr) return -1;
  for (const auto& t : w->session->assignment().spec.embeddings()) {
    if (t.name() == table) return t.dim();
  }
  return -1;
}

absl::Status CheckTable(const fulcrum_worker* w, const char* table, int64_t n,
                        const void* ids, const void* rows) {
  if (Dim(w, table) < 0) {
    return absl::NotFoundError(absl::StrCat(
        "table: the job has no embedding table '",
        table == nullptr ? "(null)" : std::string(table).substr(0, 64), "'"));
  }
  if (n < 0 || (n > 0 && (ids == nullptr || rows == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("n must be >= 0 with ids and rows given, got ", n));
  }
  return absl::OkStatus();
}

}  // namespace

extern "C" {

int32_t fulcrum_table_dim(const fulcrum_worker* w, const char* table) {
  return Dim(w, table);
}

int fulcrum_pull_rows(fulcrum_worker* w, const char* table, int64_t step,
                      const uint64_t* ids, int64_t n, float* out,
                      fulcrum_error* error) {
  if (absl::Status s = CheckTable(w, table, n, ids, out); !s.ok())
    return Fail(s, error);
  absl::StatusOr<fulcrum::RowClient*> rows = Rows(w);
  if (!rows.ok()) return Fail(rows.status(), error);
  absl::Status s = (*rows)->Pull(table, Dim(w, table),
                                 absl::MakeConstSpan(ids, n), out, step);
  return s.ok() ? 0 : Fail(s, error);
}

int fulcrum_push_rows(fulcrum_worker* w, const char* table, int64_t step,
                      const uint64_t* ids, int64_t n, const float* grads,
                      fulcrum_error* error) {
  if (absl::Status s = CheckTable(w, table, n, ids, grads); !s.ok())
    return Fail(s, error);
  absl::StatusOr<fulcrum::RowClient*> rows = Rows(w);
  if (!rows.ok()) return Fail(rows.status(), error);
  const int dim = Dim(w, table);
  absl::Status s = (*rows)->Push(table, dim, step, absl::MakeConstSpan(ids, n),
                                 absl::MakeConstSpan(grads, n * dim));
  return s.ok() ? 0 : Fail(s, error);
}

}  // extern "C"
