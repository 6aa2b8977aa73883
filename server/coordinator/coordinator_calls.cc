// Coordinator: the users' and the members' calls. Each checks its request
// before it changes anything (a rejected request changes no state), plans
// under the lock, and runs its effects (EndJob calls, the journal's sync)
// after it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/confined_path.h"
#include "common/config/job_spec.h"
#include "common/config/model_layout.h"
#include "common/status/status_macros.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/job_status_view.h"

namespace fulcrum {
namespace {

// An id as echoed in an error: at most 64 bytes of what the caller sent.
std::string Id(const std::string& id) {
  return id.size() <= 64 ? id : absl::StrCat(id.substr(0, 64), "...");
}

}  // namespace

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
  std::unique_ptr<Job> job;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    const int64_t largest = members_.LargestShardMemory();
    if (largest >= 0 && shard_bytes > largest) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model: a shard would hold ", shard_bytes, " bytes of this job ",
          "(parameters, optimizer state and aggregation buffers over ",
          spec.shards(), " shards); the largest registered shard declares ",
          largest, " (fulcrum-server --memory_bytes): use more shards or a "
          "smaller model"));
    }
    const std::string id = absl::StrCat("job-", next_job_++);
    job = std::make_unique<Job>(id, std::move(spec), options_.env->Now());
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
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  if (request.hostname().empty() || request.hostname().size() > 253) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hostname must be 1 to 253 bytes, got ", request.hostname().size()));
  }
  if (request.device().size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device must be at most 256 bytes, got ", request.device().size()));
  }
  v1::RegisterWorkerResponse response;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!request.job_id().empty()) {  // an external trainer of one job
      const Job* job = FindJob(request.job_id());
      if (job == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("job_id '", Id(request.job_id()), "' not found"));
      }
      if (job->phase == JobPhase::kEnded) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job_id '", request.job_id(), "' already ended (",
            v1::JobState_Name(job->status.state()), "): ",
            job->status.message()));
      }
    }
    bool persist = false;
    WorkerMember& w =
        members_.AddWorker(request, options_.env->Now(), &persist);
    if (persist) ticket = PersistCounters();
    response.set_worker_id(w.id);
  }
  Sync(ticket).IgnoreError();
  response.set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  return response;
}

WorkerMember* Coordinator::AdoptOrFind(const v1::WorkerHeartbeatRequest& r) {
  WorkerMember* w = members_.FindWorker(r.worker_id());
  if (w != nullptr || !members_.Adoptable(r.worker_id(), "w-")) return w;
  // Issued before this coordinator restarted: take it back, with the job it
  // trains if it is a member of that job's generation.
  w = &members_.AdoptWorker(r.worker_id(), r.hostname(), r.device());
  const Job* job = FindJob(r.job_id());
  if (job != nullptr &&
      (job->in_generation(w->id) || job->phase == JobPhase::kEnded)) {
    w->job_id = r.job_id();
  }
  std::cerr << "fulcrum-coordinator: re-adopted worker " << w->id
            << (w->job_id.empty() ? "" : " of " + w->job_id) << "\n";
  return w;
}

// A worker offered a place says it loaded the job's data (or could not).
void Coordinator::TakePrepared(WorkerMember& w,
                               const v1::WorkerHeartbeatRequest& r) {
  if (!w.preparing || r.prepared_job().empty() || r.prepared_job() != w.job_id)
    return;
  w.preparing = false;
  Job* job = FindJob(w.job_id);
  if (job == nullptr) {
    w.job_id.clear();
  } else if (!r.prepare_error().empty()) {
    // It cannot load this job's data: not offered this job again.
    std::cerr << "fulcrum-coordinator: worker " << w.id << " cannot prepare "
              << w.job_id << ": " << r.prepare_error() << "\n";
    AddEvent(*job, "failed", w.id);
    w.declined.insert(w.job_id);
    w.job_id.clear();
  } else if (job->running() && job->phase != JobPhase::kFinishing &&
             static_cast<int>(job->members.size()) <
                 job->spec().workers().max()) {
    job->members.push_back(w.id);  // the next round takes it in
  } else {
    w.job_id.clear();  // the job ended or filled up meanwhile
  }
}

v1::WorkerHeartbeatResponse Coordinator::AssignmentOf(
    WorkerMember& w, const std::string& reported_job) {
  v1::WorkerHeartbeatResponse response;
  if (w.job_id.empty()) {
    // Registered for one job that ended without it: told so, it stops
    // waiting (the C API's join fails instead of timing out).
    const Job* pinned = FindJob(w.pinned_job);
    if (pinned != nullptr && pinned->phase == JobPhase::kEnded) {
      v1::WorkerAssignment* a = response.mutable_assignment();
      a->set_job_id(w.pinned_job);
      a->set_job_state(pinned->status.state());
      a->set_job_message(pinned->status.message());
    }
    return response;
  }
  const Job* job = FindJob(w.job_id);
  if (job == nullptr ||
      (job->phase == JobPhase::kEnded && reported_job != w.job_id)) {
    w.job_id.clear();  // the worker has let go of the finished job
    return response;
  }
  if (job->pending()) return response;  // still starting
  v1::WorkerAssignment* a = response.mutable_assignment();
  a->set_job_id(w.job_id);
  *a->mutable_spec() = job->spec();
  a->set_job_state(job->status.state());
  if (w.preparing) {
    a->set_prepare(true);
    return response;
  }
  // Joining: not in the generation the shards serve yet.
  const auto& members = job->status.workers();
  auto rank = std::find(members.begin(), members.end(), w.id);
  if (rank == members.end()) {
    response.clear_assignment();
    return response;
  }
  a->set_rank(static_cast<int32_t>(rank - members.begin()));
  // The shards wait for the model's values: rank 0 uploads its own.
  a->set_initialize(a->rank() == 0 && !job->awaiting_values.empty());
  a->set_world_size(members.size());
  a->set_generation(job->status.generation());
  for (const std::string& address : job->shard_addresses)
    a->add_shard_addresses(address);
  return response;
}

absl::StatusOr<v1::WorkerHeartbeatResponse> Coordinator::WorkerHeartbeat(
    const v1::WorkerHeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  WorkerMember* w = AdoptOrFind(request);
  if (w == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("worker_id '", Id(request.worker_id()),
                     "' is not registered (lease expired?): register again"));
  }
  w->last_heartbeat = options_.env->Now();
  w->generation = request.generation();
  TakePrepared(*w, request);
  Job* job = FindJob(w->job_id);
  if (!request.job_id().empty() && request.job_id() == w->job_id &&
      job != nullptr) {
    w->progress = request.progress();
    job->samples[w->id] = request.progress().samples_total();
  }
  return AssignmentOf(*w, request.job_id());
}

absl::StatusOr<v1::RegisterShardResponse> Coordinator::RegisterShard(
    const v1::RegisterShardRequest& request) {
  if (request.address().empty() ||
      request.address().find(':') == std::string::npos ||
      request.address().size() > 261) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address must be host:port, got '", request.address().substr(0, 64),
        "'"));
  }
  if (request.memory_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_bytes must be >= 0, got ", request.memory_bytes()));
  }
  v1::RegisterShardResponse response;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    // A shard registering at a live member's address is refused (anyone
    // could claim it); once that lease ran out it is the member restarted.
    if (ShardMember* old = members_.ShardAt(request.address());
        old != nullptr &&
        options_.env->Now() - old->last_heartbeat < options_.lease) {
      return absl::FailedPreconditionError(absl::StrCat(
          "address ", request.address().substr(0, 64), " is served by live "
          "shard ", old->id, "; a restarted shard registers once its lease "
          "(--lease_ms) has run out"));
    }
    if (ShardMember* old = members_.ShardAt(request.address())) {
      const std::string id = old->id;
      members_.RemoveShard(id);
      std::cerr << "fulcrum-coordinator: shard " << id << " at "
                << request.address() << " restarted\n";
      LoseShard(id);
    }
    bool persist = false;
    ShardMember& s =
        members_.AddShard(request.address(), options_.env->Now(), &persist);
    s.memory_bytes = request.memory_bytes();
    if (persist) ticket = PersistCounters();
    response.set_shard_id(s.id);
  }
  Sync(ticket).IgnoreError();
  response.set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  return response;
}

void Coordinator::TakeNonFinite(Job& job, const std::string& shard_id,
                                const v1::NonFiniteUpdates& n, Effects* e) {
  int64_t& seen = job.nonfinite_seen[shard_id];
  if (n.count() <= seen) return;
  seen = n.count();
  if (!job.running()) return;
  const std::string what = absl::StrCat(
      "step ", n.step(), ": the update of partition ", n.partition(),
      " would have made values non-finite and was not applied (largest "
      "gradient element at least ", n.largest(), " from ", n.worker_id(), ")");
  std::cerr << "fulcrum-coordinator: job " << job.id() << " " << what << "\n";
  AddEvent(job, "nonfinite", n.worker_id(), n.step());
  if (job.spec().optimizer().on_nonfinite() == "fail_job") {
    Finish(job, v1::FAILED,
           absl::StrCat(what, " (optimizer.on_nonfinite: fail_job)"), e);
  }
}

void Coordinator::TakeShardStats(const std::string& shard_id,
                                 const v1::ShardJobStats& stats, Effects* e) {
  Job* job = FindJob(stats.job_id());
  if (job == nullptr) return;
  const auto& shards = job->status.shards();
  const int index = static_cast<int>(
      std::find(shards.begin(), shards.end(), shard_id) - shards.begin());
  if (index < shards.size()) {
    if (stats.has_nonfinite())
      TakeNonFinite(*job, shard_id, stats.nonfinite(), e);
    job->checkpoint_steps[index].assign(stats.checkpoint_steps().begin(),
                                        stats.checkpoint_steps().end());
    if (job->external() && stats.generation() == job->status.generation()) {
      if (stats.initialized()) {
        job->awaiting_values.erase(index);
      } else {
        job->awaiting_values.insert(index);
      }
    }
    if (stats.has_ledger() && stats.generation() == job->status.generation()) {
      job->ledger.clear();
      for (const v1::LedgerEntry& e : stats.ledger()) job->ledger[e.chunk()] = e;
    }
  }
  job->staleness[shard_id] = stats.staleness();
  job->stalls[shard_id].assign(stats.stalls().begin(), stats.stalls().end());
}

absl::StatusOr<v1::ShardHeartbeatResponse> Coordinator::ShardHeartbeat(
    const v1::ShardHeartbeatRequest& request) {
  Effects e;
  absl::StatusOr<v1::ShardHeartbeatResponse> response = ShardBeat(request, &e);
  Apply(e);
  return response;
}

absl::StatusOr<v1::ShardHeartbeatResponse> Coordinator::ShardBeat(
    const v1::ShardHeartbeatRequest& request, Effects* e) {
  absl::MutexLock lock(&mu_);
  ShardMember* s = members_.FindShard(request.shard_id());
  if (s == nullptr && members_.Adoptable(request.shard_id(), "s-") &&
      !request.address().empty()) {
    s = &members_.AdoptShard(request.shard_id(), request.address());
    s->memory_bytes = request.memory_bytes();
    std::cerr << "fulcrum-coordinator: re-adopted shard " << s->id << " at "
              << s->address << "\n";
  }
  if (s == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("shard_id '", Id(request.shard_id()),
                     "' is not registered (lease expired?): register again"));
  }
  s->last_heartbeat = options_.env->Now();
  for (const v1::ShardJobStats& stats : request.jobs())
    TakeShardStats(s->id, stats, e);
  v1::ShardHeartbeatResponse response;
  for (const auto& [id, job] : jobs_) {
    const auto& shards = job->status.shards();
    if (job->phase != JobPhase::kEnded &&
        std::find(shards.begin(), shards.end(), s->id) != shards.end()) {
      response.add_active_jobs(id);
    }
  }
  return response;
}

absl::Status Coordinator::Leave(const std::string& member_id) {
  absl::MutexLock lock(&mu_);
  if (WorkerMember* w = members_.FindWorker(member_id)) {
    Job* job = FindJob(w->job_id);
    if (job != nullptr && job->running()) DropMember(*job, member_id, "left");
    members_.RemoveWorker(member_id);
    return absl::OkStatus();
  }
  if (!members_.RemoveShard(member_id)) {
    return absl::NotFoundError(
        absl::StrCat("member_id '", Id(member_id), "' not found"));
  }
  LoseShard(member_id);
  return absl::OkStatus();
}

// Workers other than `except` that are joining `job` or could: offered a
// place, or idle, fitting and not having declined it.
bool Coordinator::Joinable(const Job& job, const std::string& except) const {
  for (const auto& [id, w] : members_.workers()) {
    if (id == except || w.declined.count(job.id())) continue;
    if (w.preparing && w.job_id == job.id()) return true;
  }
  for (const std::string& id : members_.IdleWorkers(job.id(), job.external())) {
    if (id != except && !members_.FindWorker(id)->declined.count(job.id()))
      return true;
  }
  return false;
}

// The report ends the worker's part; rank 0's done ends the job.
void Coordinator::EndByReport(Job& job, WorkerMember& w,
                              const v1::ReportProgressRequest& request,
                              Effects* e) {
  const bool rank0 = job.status.workers(0) == w.id;
  if (request.done() && job.running()) job.SetPhase(JobPhase::kFinishing);
  if (!request.error().empty()) {
    // One worker failing costs its share of the work, not the job; the job
    // fails when no member is left.
    std::cerr << "fulcrum-coordinator: worker " << w.id << " failed "
              << job.id() << ": " << request.error() << "\n";
    if (job.running()) DropMember(job, w.id, "failed");
    w.declined.insert(job.id());  // not offered this job again
    const std::string why =
        absl::StrCat("worker ", w.id, ": ", request.error());
    if (job.members.empty() && !Joinable(job, w.id)) {
      Finish(job, v1::FAILED, why, e);
    } else if (job.members.empty() && job.running()) {
      job.status.set_message(absl::StrCat(
          "waiting for workers: the last member failed (", why, ")"));
    }
  } else if (request.done() && rank0) {
    const v1::Progress& p = request.progress();
    const double target = job.spec().target_accuracy();
    std::string message = absl::StrCat("trained ", p.step(),
                                       " steps; test accuracy ",
                                       p.test_accuracy());
    if (target > 0) {
      absl::StrAppend(&message,
                      p.test_accuracy() >= target ? " (target "
                                                  : " (below target ",
                      target, ")");
    }
    Finish(job, v1::SUCCEEDED, message, e);
  }
  if (request.done() && w.job_id == job.id()) AddEvent(job, "finished", w.id);
  if (request.done() || !request.error().empty()) w.job_id.clear();
}

absl::StatusOr<v1::ReportProgressResponse> Coordinator::ReportProgress(
    const v1::ReportProgressRequest& request) {
  Effects e;
  v1::ReportProgressResponse response;
  {
    absl::MutexLock lock(&mu_);
    // Every check before any change: a rejected report adopts nobody.
    Job* job = FindJob(request.job_id());
    WorkerMember* w = members_.FindWorker(request.worker_id());
    const bool adopt =
        w == nullptr && members_.Adoptable(request.worker_id(), "w-");
    if (w == nullptr && !adopt) {
      return absl::NotFoundError(
          absl::StrCat("worker_id '", Id(request.worker_id()), "' not found"));
    }
    if (job == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("job_id '", Id(request.job_id()), "' not found"));
    }
    if (!job->in_generation(request.worker_id())) {
      return absl::PermissionDeniedError(
          absl::StrCat("worker ", request.worker_id(), " is not a member of ",
                       request.job_id()));
    }
    if (adopt) {  // its report beat its heartbeat after a restart
      w = &members_.AdoptWorker(request.worker_id(), "", "");
      w->job_id = request.job_id();
    }
    w->last_heartbeat = options_.env->Now();
    w->progress = request.progress();
    job->samples[w->id] = request.progress().samples_total();
    if (job->status.workers(0) == w->id) {  // rank 0 speaks for the job
      const double rate = job->status.progress().samples_per_sec();
      *job->status.mutable_progress() = request.progress();
      job->status.mutable_progress()->set_samples_per_sec(rate);
    }
    EndByReport(*job, *w, request, &e);
    response.set_job_state(job->status.state());
  }
  Apply(e);
  return response;
}

absl::StatusOr<v1::LeaseChunkResponse> Coordinator::LeaseChunk(
    const v1::LeaseChunkRequest& request) {
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(request.job_id());
  if (job == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("job_id '", Id(request.job_id()), "' not found"));
  }
  WorkerMember* w = members_.FindWorker(request.worker_id());
  if (job->phase == JobPhase::kRecovering ||
      (w == nullptr && members_.Adoptable(request.worker_id(), "w-"))) {
    return absl::UnavailableError(
        "the coordinator restarted and is re-adopting the job's members; "
        "retry");
  }
  if (w == nullptr || !job->in_generation(request.worker_id())) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker_id '", Id(request.worker_id()),
                     "' is not a member of ", request.job_id()));
  }
  if (!job->running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " is ",
                     v1::JobState_Name(job->status.state())));
  }
  if (request.generation() != job->status.generation()) {
    return absl::AbortedError(absl::StrCat(
        "generation ", request.generation(), " is stale: job ",
        request.job_id(), " is at generation ", job->status.generation(),
        "; re-join"));
  }
  if (job->chunks == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", request.job_id(), " uses dataset.sharding '",
        job->spec().dataset().sharding(), "', not chunks"));
  }
  if (request.dataset_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset_size must be > 0, got ", request.dataset_size()));
  }
  ChunkTable& chunks = *job->chunks;
  if (chunks.dataset_size() < 0) {
    chunks.set_dataset_size(request.dataset_size());
    chunks.Rebuild(job->ledger);
  } else if (chunks.dataset_size() != request.dataset_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset_size ", request.dataset_size(), " differs from ",
        chunks.dataset_size(), " reported by other workers of ",
        request.job_id()));
  }
  w->last_heartbeat = options_.env->Now();
  return chunks.Lease(request.worker_id(),
                      {request.done().begin(), request.done().end()},
                      {request.in_flight().begin(), request.in_flight().end()});
}

namespace {

// The first tensor whose name, shape or kind differs, as a message; empty:
// none.
std::string FirstDifference(const v1::ModelSpec& have,
                            const google::protobuf::RepeatedPtrField<
                                v1::TensorSpec>& want) {
  auto shape = [](const v1::TensorSpec& t) {
    return absl::StrCat("[", absl::StrJoin(t.shape(), ", "), "]",
                        t.buffer() ? " (buffer)" : "");
  };
  const int n = std::max(have.tensors_size(), want.size());
  for (int i = 0; i < n; ++i) {
    if (i >= want.size()) {
      return absl::StrCat("tensors[", i, "] '", have.tensors(i).name(),
                          "' ", shape(have.tensors(i)), " is missing");
    }
    if (i >= have.tensors_size()) {
      return absl::StrCat("tensors[", i, "] '", want[i].name(),
                          "' is not in the job's model");
    }
    const v1::TensorSpec& h = have.tensors(i);
    if (h.name() != want[i].name() || h.buffer() != want[i].buffer() ||
        !std::equal(h.shape().begin(), h.shape().end(),
                    want[i].shape().begin(), want[i].shape().end())) {
      return absl::StrCat("tensors[", i, "] '", want[i].name(), "' ",
                          shape(want[i]), " differs from the job's '",
                          h.name(), "' ", shape(h));
    }
  }
  return "";
}

// A built-in model's tensors, as an external trainer must declare them.
v1::ModelSpec BuiltInTensors(const v1::JobSpec& spec) {
  v1::ModelSpec out;
  absl::StatusOr<ParameterLayout> layout = LayoutForSpec(spec);
  if (!layout.ok()) return out;
  for (const TensorInfo& t : layout->tensors()) {
    v1::TensorSpec* o = out.add_tensors();
    o->set_name(t.name);
    for (int64_t d : t.shape) o->add_shape(d);
  }
  return out;
}

}  // namespace

absl::StatusOr<v1::DeclareModelResponse> Coordinator::DeclareModel(
    const v1::DeclareModelRequest& request) {
  v1::DeclareModelResponse response;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    const WorkerMember* w = members_.FindWorker(request.worker_id());
    if (w == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "worker_id '", request.worker_id(), "' is not registered"));
    }
    Job* job = FindJob(request.job_id());
    if (job == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("job_id '", Id(request.job_id()), "' not found"));
    }
    if (w->pinned_job != request.job_id()) {
      return absl::PermissionDeniedError(
          absl::StrCat("worker ", w->id, " registered for job '",
                       w->pinned_job, "', not ", request.job_id()));
    }
    v1::ModelSpec declared = job->spec().model();
    declared.set_type("external");
    declared.clear_layers();
    declared.mutable_tensors()->CopyFrom(request.tensors());
    if (absl::Status s = ValidateModelSpec(declared); !s.ok()) return s;
    if (!job->external()) {
      // A built-in model: an external trainer must have its very tensors.
      if (std::string diff = FirstDifference(BuiltInTensors(job->spec()),
                                             request.tensors());
          !diff.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the model does not match job ", job->id(), ": ", diff));
      }
    } else if (job->spec().model().tensors_size() == 0) {
      *job->status.mutable_spec()->mutable_model() = declared;
      ticket = Persist(*job);
    } else if (std::string diff = FirstDifference(job->spec().model(),
                                                  request.tensors());
               !diff.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the model does not match job ", job->id(), ": ", diff));
    }
    *response.mutable_spec() = job->spec();
  }
  if (absl::Status durable = Sync(ticket); !durable.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot record the model durably: ", durable.message()));
  }
  return response;
}

}  // namespace fulcrum
