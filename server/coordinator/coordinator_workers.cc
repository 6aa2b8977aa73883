// Coordinator: the workers' calls - registration, heartbeats (offers and
// assignments), progress and the end of a worker's part, chunk leases, the
// model declarations of external trainers, leaving. Checked before any
// change, planned under the lock, effects after it (as coordinator_calls.cc).
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
#include "common/dataplane/host_id.h"
#include "common/status/status_macros.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/echo.h"
#include "server/coordinator/job_status_view.h"

namespace fulcrum {
namespace {

absl::Status CheckHostId(const std::string& host_id) {
  if (host_id.size() <= kMaxHostIdBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("host_id must be at most ",
                                                 kMaxHostIdBytes,
                                                 " bytes, got ", host_id.size()));
}

}  // namespace

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
  RETURN_IF_ERROR(CheckHostId(request.host_id()));
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
  SetTimings(&response);
  return response;
}

WorkerMember* Coordinator::AdoptOrFind(const v1::WorkerHeartbeatRequest& r) {
  WorkerMember* w = members_.FindWorker(r.worker_id());
  if (w != nullptr) return w;
  w = members_.ReadoptWorker(r.worker_id(), options_.env->Now());
  if (w != nullptr) {
    Rejoin(*w, r.job_id());
    return w;
  }
  if (!members_.Adoptable(r.worker_id(), "w-")) return nullptr;
  // Issued before this coordinator restarted: take it back, with the job it
  // trains if it is a member of that job's generation.
  w = &members_.AdoptWorker(r.worker_id(), r.hostname(), r.device());
  w->host_id = r.host_id();
  const Job* job = FindJob(r.job_id());
  if (job != nullptr &&
      (job->in_generation(w->id) || job->phase == JobPhase::kEnded)) {
    w->job_id = r.job_id();
  }
  std::cerr << "fulcrum-coordinator: re-adopted worker " << w->id
            << (w->job_id.empty() ? "" : " of " + w->job_id) << "\n";
  return w;
}

// A worker whose lease ran out while it was alive is heard from again: it
// rejoins the job it still trains (the next round takes it back in, with
// the chunk table rebuilt from the ledger), or is idle.
void Coordinator::Rejoin(WorkerMember& w, const std::string& reported_job) {
  Job* job = FindJob(w.job_id);
  if (job != nullptr) job->lapsed.erase(w.id);
  w.preparing = false;  // an offer made before the lapse is made again
  const bool trains = job != nullptr && reported_job == w.job_id;
  if (trains && job->phase == JobPhase::kEnded) {
    // Keeps the job: the heartbeat's answer says how it ended.
  } else if (trains && job->running() && job->phase != JobPhase::kFinishing &&
             static_cast<int>(job->members.size()) <
                 job->spec().workers().max()) {
    if (std::find(job->members.begin(), job->members.end(), w.id) ==
        job->members.end()) {
      job->members.push_back(w.id);
    }
    job->next.force = true;
    job->rejoin_until = options_.env->Now() + RejoinWait();
    AddEvent(*job, "rejoined", w.id);
  } else {
    w.job_id.clear();
  }
  std::cerr << "fulcrum-coordinator: worker " << w.id
            << " is back after its lease ran out"
            << (w.job_id.empty() ? "" : ", in " + w.job_id) << "\n";
}

void Coordinator::AddFinished(Job& job, const std::string& worker) {
  for (const v1::MembershipEvent& e : job.status.events()) {
    if (e.kind() == "finished" && e.member_id() == worker) return;
  }
  AddEvent(job, "finished", worker);
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
    // A worker that trains the job and rejoins it (its lease lapsed) is told
    // the job is still its own, with no generation: it waits for the one
    // that takes it back in instead of leaving.
    const bool rejoining =
        reported_job == w.job_id &&
        std::find(job->members.begin(), job->members.end(), w.id) !=
            job->members.end();
    if (!rejoining) response.clear_assignment();
    return response;
  }
  a->set_rank(static_cast<int32_t>(rank - members.begin()));
  // The shards wait for the model's values: rank 0 uploads its own.
  a->set_initialize(a->rank() == 0 && !job->awaiting_values.empty());
  a->set_world_size(members.size());
  a->set_generation(job->status.generation());
  for (const std::string& address : job->shard_addresses)
    a->add_shard_addresses(address);
  if (PreReduce(job->spec())) AddHostGroup(w, members, a);
  return response;
}

void Coordinator::AddHostGroup(const WorkerMember& w,
                               const google::protobuf::RepeatedPtrField<
                                   std::string>& members,
                               v1::WorkerAssignment* a) {
  for (const std::string& id : members) {
    const WorkerMember* peer = members_.FindWorker(id);
    if (peer != nullptr && peer->GroupHost() == w.GroupHost())
      a->add_host_group()->set_worker_id(id);
  }
  if (a->host_group_size() < 2) a->clear_host_group();
}

absl::StatusOr<v1::WorkerHeartbeatResponse> Coordinator::WorkerHeartbeat(
    const v1::WorkerHeartbeatRequest& request) {
  RETURN_IF_ERROR(CheckHostId(request.host_id()));
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
    // Every member of the last generation finished with it: the others
    // learn the end from a heartbeat and wind down without a report of
    // their own (they had no "finished" event).
    for (const std::string& member : job.generation_workers())
      AddFinished(job, member);
  }
  if (request.done() && w.job_id == job.id()) AddFinished(job, w.id);
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
    const bool lapsed = w == nullptr && members_.LapsedWorker(request.worker_id());
    if (w == nullptr && !adopt && !lapsed) {
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
    if (lapsed) {  // its report beat the heartbeat that takes it back
      w = members_.ReadoptWorker(request.worker_id(), options_.env->Now());
      w->job_id = request.job_id();
    } else if (adopt) {  // its report beat its heartbeat after a restart
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
  if (w == nullptr && members_.LapsedWorker(request.worker_id())) {
    return absl::UnavailableError(absl::StrCat(
        "worker_id '", Id(request.worker_id()), "': its lease ran out; its "
        "next heartbeat takes it back; retry"));
  }
  // A member of this job asking for an older generation re-joins (the
  // job moved on while it was away), whether or not the newer one has it.
  if (w != nullptr && w->job_id == request.job_id() && job->running() &&
      request.generation() < job->status.generation()) {
    return absl::AbortedError(absl::StrCat(
        "generation ", request.generation(), " is stale: job ",
        request.job_id(), " is at generation ", job->status.generation(),
        "; re-join"));
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
  // A size no table is built for (nothing a member sends sizes memory
  // beyond kMaxChunksPerEpoch chunks), and one the spec fixed or the first
  // lease did: a member that disagrees is the one refused.
  RETURN_IF_ERROR(
      CheckDatasetSize(job->spec(), request.dataset_size(), "dataset_size"));
  ChunkTable& chunks = *job->chunks;
  const int64_t fixed = job->spec().dataset().size();
  if (fixed > 0 && request.dataset_size() != fixed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset_size ", request.dataset_size(), " differs from the job's "
        "dataset.size ", fixed, " (", request.job_id(), ")"));
  }
  if (chunks.dataset_size() < 0) {
    chunks.set_dataset_size(request.dataset_size());
    chunks.Rebuild(job->ledger);
  } else if (chunks.dataset_size() != request.dataset_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset_size ", request.dataset_size(), " differs from ",
        chunks.dataset_size(), " reported by other workers of ",
        request.job_id(), " (dataset.size in the spec fixes it)"));
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
      // As a built-in model at submit: one no registered shard could hold
      // is refused now (a shard once allocated 2.8 GB for it and failed).
      v1::JobSpec with = job->spec();
      *with.mutable_model() = declared;
      ASSIGN_OR_RETURN(ParameterLayout layout, LayoutForSpec(with));
      const int64_t bytes = ShardBytes(with, layout) + EmbeddingShardBytes(with);
      const int64_t largest = members_.LargestShardMemory();
      if (largest >= 0 && bytes > largest) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensors: a shard would hold ", bytes, " bytes of this model "
            "(parameters, optimizer state and aggregation buffers over ",
            with.shards(), " shards); the largest registered shard declares ",
            largest, " (fulcrum-server --memory_bytes): submit the job with "
            "more shards or declare a smaller model"));
      }
      *job->status.mutable_spec()->mutable_model() = declared;
      job->shard_bytes = bytes;
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
