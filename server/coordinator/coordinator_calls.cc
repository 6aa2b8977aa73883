// Coordinator: the users' calls (fulcrumctl: submit, status, list, cancel,
// members, export). Each checks its request before it changes anything (a
// rejected request changes no state), plans under the lock, and runs its
// effects (EndJob calls, the journal's sync) after it. The members' calls:
// coordinator_workers.cc, coordinator_shards.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/confined_path.h"
#include "common/config/embedding_spec.h"
#include "common/config/job_spec.h"
#include "common/config/model_layout.h"
#include "common/status/status_macros.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/echo.h"
#include "server/coordinator/job_status_view.h"

namespace fulcrum {

absl::StatusOr<std::string> Coordinator::SubmitJob(v1::JobSpec spec) {
  ApplyDefaults(&spec);
  if (absl::Status valid = ValidateJobSpec(spec); !valid.ok()) return valid;
  if (!options_.data_root.empty() && !spec.dataset().dir().empty()) {
    RETURN_IF_ERROR(
        ConfinedPath(options_.data_root, spec.dataset().dir(), "dataset.dir")
            .status());
  }
  if (!options_.checkpoint_root.empty() &&
      spec.checkpoint().every_steps() > 0) {
    RETURN_IF_ERROR(ConfinedPath(options_.checkpoint_root,
                                 spec.checkpoint().dir(), "checkpoint.dir")
                        .status());
  }
  // A model no registered shard could hold is refused now, not left
  // PENDING (or crash a shard) later.
  int64_t shard_bytes = 0;
  if (absl::StatusOr<ParameterLayout> layout = LayoutForSpec(spec);
      layout.ok()) {
    shard_bytes = ShardBytes(spec, *layout);
  }
  shard_bytes += EmbeddingShardBytes(spec);
  std::unique_ptr<Job> job;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    const int64_t largest = members_.LargestShardMemory();
    if (largest >= 0 && shard_bytes > largest) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model: a shard would hold ", shard_bytes, " bytes of this job ",
          "(parameters, optimizer state, aggregation buffers and embedding "
          "rows at capacity over ",
          spec.shards(), " shards); the largest registered shard declares ",
          largest, " (fulcrum-server --memory_bytes): use more shards or a "
          "smaller model"));
    }
    const std::string id = absl::StrCat("job-", next_job_++);
    job = std::make_unique<Job>(id, std::move(spec), options_.env->Now());
    job->shard_bytes = shard_bytes;
    ticket = std::max(Persist(*job), PersistCounters());
  }
  // The job exists once it is durable (no lock held while the disk works).
  if (absl::Status durable = Sync(ticket); !durable.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot record the job durably: ", durable.message()));
  }
  absl::MutexLock lock(&mu_);
  const std::string id = job->id();
  job_order_.push_back(id);
  jobs_[id] = std::move(job);
  return id;
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end())
    return absl::NotFoundError(absl::StrCat("job_id '", Id(job_id), "' not found"));
  return JobStatusView(*it->second, members_);
}

std::vector<v1::JobStatus> Coordinator::ListJobs() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::JobStatus> out;
  for (const std::string& id : job_order_)
    out.push_back(JobStatusView(*jobs_.at(id), members_));
  return out;
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::ListJobs(
    const v1::ListJobsRequest& request) const {
  constexpr int kDefaultPage = 100, kMaxPage = 1000;
  if (request.page_size() < 0 || request.page_size() > kMaxPage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size must be in [0, ", kMaxPage, "], got ", request.page_size()));
  }
  const int size = request.page_size() == 0 ? kDefaultPage : request.page_size();
  absl::MutexLock lock(&mu_);
  auto it = job_order_.begin();
  if (!request.page_token().empty()) {
    it = std::find(job_order_.begin(), job_order_.end(), request.page_token());
    if (it == job_order_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "page_token '", request.page_token().substr(0, 64),
          "' is not a job of this coordinator (use a next_page_token)"));
    }
    ++it;
  }
  v1::ListJobsResponse response;
  for (; it != job_order_.end() && response.jobs_size() < size; ++it) {
    v1::JobStatus* s = response.add_jobs();
    *s = JobStatusView(*jobs_.at(*it), members_);
    s->clear_events();
    s->clear_epochs();
    s->clear_earlier_epochs();
    s->clear_stalls();
    s->mutable_spec()->mutable_model()->clear_tensors();
  }
  if (it != job_order_.end() && response.jobs_size() > 0)
    response.set_next_page_token(response.jobs(response.jobs_size() - 1).job_id());
  return response;
}

absl::StatusOr<v1::JobStatus> Coordinator::CancelJob(
    const std::string& job_id) {
  Effects e;
  v1::JobStatus status;
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJob(job_id);
    if (job == nullptr)
      return absl::NotFoundError(
          absl::StrCat("job_id '", Id(job_id), "' not found"));
    if (job->phase == JobPhase::kEnded) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " already ended (",
                       v1::JobState_Name(job->status.state()), ")"));
    }
    Finish(*job, v1::CANCELLED, "cancelled by user", &e);
    status = job->status;
  }
  Apply(e);
  return status;
}

std::vector<v1::Member> Coordinator::ListMembers() const {
  absl::MutexLock lock(&mu_);
  return members_.List(options_.env->Now());
}

namespace {

// An export never writes a model with a NaN or infinite value (the shards
// refuse such updates; this is the last line).
absl::Status CheckFiniteParams(const v1::Params& p) {
  const std::string& data = p.data();
  for (size_t i = 0; i + 4 <= data.size(); i += 4) {
    float v;
    std::memcpy(&v, data.data() + i, 4);
    if (!std::isfinite(v)) {
      return absl::DataLossError(absl::StrCat(
          "partition ", p.partition(), " element ", p.offset() + i / 4,
          " is not finite (", v, "): the model is not exported"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Coordinator::ExportJob(
    const std::string& job_id,
    const std::function<bool(const v1::ExportChunk&)>& sink) {
  v1::ExportChunk chunk;
  std::vector<std::string> addresses;
  bool has_tables = false;
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJob(job_id);
    if (job == nullptr)
      return absl::NotFoundError(
          absl::StrCat("job_id '", Id(job_id), "' not found"));
    if (job->spec().optimizer().type() == "average") {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " uses optimizer.type average: its shards hold the "
          "last averaged gradient, not the model; save the model from a "
          "worker"));
    }
    if (static_cast<int>(job->shard_addresses.size()) != job->spec().shards()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " has no shards assigned (state ",
                       v1::JobState_Name(job->status.state()), ")"));
    }
    *chunk.mutable_spec() = job->spec();
    addresses = job->shard_addresses;
    has_tables = job->spec().embeddings_size() > 0;
  }
  chunk.set_shard(-1);
  if (!sink(chunk)) return absl::CancelledError("the export's reader went away");
  chunk.clear_spec();
  v1::PullRequest request;
  request.set_job_id(job_id);
  for (int shard = 0; shard < static_cast<int>(addresses.size()); ++shard) {
    chunk.set_shard(shard);
    absl::Status bad;
    absl::Status s = shards_->Pull(addresses[shard], request,
                                   [&](const v1::Params& p) {
                                     bad = CheckFiniteParams(p);
                                     if (!bad.ok()) return false;
                                     *chunk.mutable_params() = p;
                                     return sink(chunk);
                                   });
    if (!bad.ok()) return bad;
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("shard ", shard, " (",
                                                 addresses[shard],
                                                 "): ", s.message()));
    }
  }
  if (!has_tables) return absl::OkStatus();
  // Then every shard's embedding rows.
  chunk.clear_params();
  v1::ExportRowsRequest rows;
  rows.set_job_id(job_id);
  for (int shard = 0; shard < static_cast<int>(addresses.size()); ++shard) {
    chunk.set_shard(shard);
    absl::Status s = shards_->ExportRows(
        addresses[shard], rows, [&](const v1::RowsPage& page) {
          *chunk.mutable_rows() = page;
          return sink(chunk);
        });
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("shard ", shard, " (",
                                                 addresses[shard],
                                                 ") rows: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
