// Coordinator: its life, the tick (leases, starts, offers, rounds), the
// work it runs on the executor, and its durable state. The calls are in
// coordinator_calls.cc.
#include "server/coordinator/coordinator_core.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/model_layout.h"
#include "server/coordinator/job_status_view.h"
#include "server/coordinator/placement.h"

namespace fulcrum {
namespace {

double Unix(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

}  // namespace

Coordinator::Coordinator(Options options, ShardControl* shards)
    : options_(std::move(options)),
      shards_(shards),
      executor_(options_.executor) {
  if (executor_ == nullptr) {
    own_executor_ = std::make_unique<ThreadPool>(options_.shard_call_threads);
    own_executor_->Start();
    executor_ = own_executor_.get();
  }
}

Coordinator::~Coordinator() {
  Stop();
  if (own_executor_ != nullptr) own_executor_->Stop();  // before the jobs go
}

void Coordinator::Start() {
  ticker_ = std::thread([this] {
    absl::Time last = options_.env->Now();
    while (!stop_.WaitForNotificationWithTimeout(options_.tick)) {
      const absl::Time now = options_.env->Now();
      const absl::Duration late = now - last - options_.tick;
      last = now;
      // Not for a busy machine's scheduling hiccups: a second or more.
      if (late > std::max(absl::Seconds(1), options_.heartbeat_interval))
        Resumed(late);
      Tick();
    }
  });
}

void Coordinator::Resumed(absl::Duration stalled) {
  absl::MutexLock lock(&mu_);
  std::cerr << "fulcrum-coordinator: this process did not run for "
            << absl::FormatDuration(stalled)
            << " (paused?): every lease is extended by that\n";
  members_.ExtendLeases(stalled);
}

void Coordinator::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
}

Job* Coordinator::FindJob(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

void Coordinator::Apply(Effects& e) {
  if (options_.on_member_lost) {
    for (const std::string& role : e.lost_roles) options_.on_member_lost(role);
  }
  for (std::function<void()>& task : e.tasks) executor_->Schedule(std::move(task));
  for (auto& [address, job_id] : e.ends) {
    executor_->Schedule([this, address = address, job_id = job_id] {
      shards_->EndJob(address, job_id);
    });
  }
  Sync(e.journal_ticket).IgnoreError();
}

void Coordinator::Tick() {
  Effects e;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.env->Now();
    ExpireLeases(now, &e);
    ForgetEndedJobs(&e);
    StartJobs(now, &e);
    OfferPlaces(now);
    PlanRounds(now, &e);
  }
  Apply(e);
}

void Coordinator::ExpireLeases(absl::Time now, Effects* e) {
  MemberRegistry::Expired expired = members_.Expire(now, options_.lease);
  for (const WorkerMember& w : expired.workers) {
    e->lost_roles.push_back("worker");
    Job* job = FindJob(w.job_id);
    if (job != nullptr && job->running()) {
      DropMember(*job, w.id, "lost");
      job->lapsed.insert(w.id);
      job->lapsed_at = now;
    }
  }
  for (const std::string& id : expired.shards) {
    e->lost_roles.push_back("shard");
    LoseShard(id);
  }
}

void Coordinator::ForgetEndedJobs(Effects* e) {
  int ended = 0;
  for (const std::string& id : job_order_)
    ended += jobs_.at(id)->phase == JobPhase::kEnded;
  for (auto it = job_order_.begin();
       it != job_order_.end() && ended > options_.keep_ended_jobs;) {
    if (jobs_.at(*it)->phase != JobPhase::kEnded) {
      ++it;
      continue;
    }
    e->journal_ticket = std::max(e->journal_ticket, PersistForgotten(*it));
    jobs_.erase(*it);
    it = job_order_.erase(it);
    --ended;
  }
}

std::map<std::string, ShardUse> Coordinator::ShardLoad() const {
  std::map<std::string, ShardUse> load;
  for (const auto& [id, job] : jobs_) {
    if (!job->running() && job->phase != JobPhase::kStarting) continue;
    for (const std::string& s : job->status.shards()) {
      ++load[s].jobs;
      load[s].bytes += job->shard_bytes;
    }
  }
  return load;
}

void Coordinator::StartJobs(absl::Time now, Effects* e) {
  for (const std::string& job_id : job_order_) {
    Job& job = *jobs_[job_id];
    if (job.phase != JobPhase::kWaiting) continue;
    const v1::JobSpec& spec = job.spec();
    // An external model starts once a worker declared its tensors.
    if (job.external() && spec.model().tensors_size() == 0) {
      job.status.set_message(
          "waiting for a worker to declare the model (model.type external: "
          "fulcrum.torch workers registered for this job declare it)");
      continue;
    }
    std::vector<std::string> idle = members_.IdleWorkers(job_id, job.external());
    // Computed once (at submit, or here once an external model is declared
    // or the job came back after a restart), not at every tick.
    if (job.shard_bytes == 0) {
      if (absl::StatusOr<ParameterLayout> layout = LayoutForSpec(spec);
          layout.ok())
        job.shard_bytes = ShardBytes(spec, *layout);
    }
    const auto candidates = members_.Candidates(ShardLoad());
    const std::vector<std::string> shard_ids =
        PlaceShards(candidates, spec.shards(), job.shard_bytes);
    if (static_cast<int>(idle.size()) < spec.workers().min() ||
        shard_ids.empty()) {
      job.ready_since = absl::InfinitePast();
      // Say what it waits for: a job that asks for more than ever
      // registers would otherwise wait without a word.
      std::vector<std::string> lacking;
      if (static_cast<int>(idle.size()) < spec.workers().min()) {
        lacking.push_back(absl::StrCat(spec.workers().min(), " workers (",
                                       idle.size(), " idle now)"));
      }
      if (shard_ids.empty()) {
        const int fit = static_cast<int>(std::count_if(
            candidates.begin(), candidates.end(),
            [&](const ShardCandidate& c) { return c.Fits(job.shard_bytes); }));
        lacking.push_back(
            fit == static_cast<int>(candidates.size())
                ? absl::StrCat(spec.shards(), " shards (", candidates.size(),
                               " registered)")
                : absl::StrCat(spec.shards(), " shards with ",
                               job.shard_bytes, " bytes free (", fit, " of ",
                               candidates.size(), " registered have them)"));
      }
      job.status.set_message(
          absl::StrCat("waiting for ", absl::StrJoin(lacking, " and ")));
      continue;
    }
    if (job.ready_since == absl::InfinitePast()) job.ready_since = now;
    if (static_cast<int>(idle.size()) < spec.workers().max() &&
        now - job.ready_since < options_.start_grace) {
      continue;  // give more workers a moment to register
    }
    idle.resize(std::min<size_t>(idle.size(), spec.workers().max()));
    job.SetPhase(JobPhase::kStarting);
    job.status.clear_workers();
    job.status.clear_shards();
    job.shard_addresses.clear();
    for (const std::string& w : idle) {
      members_.FindWorker(w)->job_id = job_id;
      job.status.add_workers(w);
    }
    std::vector<std::pair<std::string, v1::InitJobRequest>> inits;
    for (int i = 0; i < spec.shards(); ++i) {
      const ShardMember& s = *members_.FindShard(shard_ids[i]);
      job.status.add_shards(s.id);
      job.shard_addresses.push_back(s.address);
      v1::InitJobRequest request;
      request.set_job_id(job_id);
      *request.mutable_spec() = spec;
      request.set_shard_index(i);
      request.set_num_shards(spec.shards());
      request.set_generation(1);
      for (const std::string& w : idle) request.add_workers(w);
      inits.emplace_back(s.address, std::move(request));
    }
    e->tasks.push_back([this, job_id, inits = std::move(inits)]() mutable {
      Launch(job_id, std::move(inits));
    });
  }
}

void Coordinator::Launch(
    std::string job_id,
    std::vector<std::pair<std::string, v1::InitJobRequest>> inits) {
  absl::Status status;
  for (const auto& [address, request] : inits) {
    status = shards_->InitJob(address, request);
    if (!status.ok()) {
      status = absl::Status(status.code(), absl::StrCat("shard ", address, ": ",
                                                        status.message()));
      break;
    }
  }
  CommitLaunch(job_id, status);
}

void Coordinator::CommitLaunch(const std::string& job_id,
                               const absl::Status& status) {
  Effects e;
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJob(job_id);
    if (job == nullptr) return;
    const bool cancelled = job->phase != JobPhase::kStarting;
    if (cancelled || !status.ok()) {
      // Release the workers; retry later unless the shard rejected the job.
      for (const std::string& w : job->status.workers()) {
        WorkerMember* m = members_.FindWorker(w);
        if (m != nullptr && m->job_id == job_id) m->job_id.clear();
      }
    }
    if (cancelled) return;
    if (status.ok()) {
      job->SetPhase(JobPhase::kRunning);
      job->status.set_generation(1);
      job->status.set_start_time_unix(Unix(options_.env->Now()));
      job->status.set_message("");
      job->members = job->generation_workers();
      job->awaiting_values.clear();
      if (job->external()) {  // rank 0 uploads the model's first values
        for (int i = 0; i < job->spec().shards(); ++i)
          job->awaiting_values.insert(i);
      }
      for (const std::string& w : job->status.workers())
        AddEvent(*job, "joined", w);
      for (const std::string& s : job->status.shards())
        AddEvent(*job, "joined", s);
      e.journal_ticket = Persist(*job);
    } else {
      job->status.clear_workers();
      job->status.clear_shards();
      job->shard_addresses.clear();
      job->SetPhase(JobPhase::kWaiting);
      if (status.code() == absl::StatusCode::kInvalidArgument ||
          status.code() == absl::StatusCode::kFailedPrecondition) {
        Finish(*job, v1::FAILED, std::string(status.message()), &e);
      } else {
        job->status.set_message(
            absl::StrCat("starting failed, will retry: ", status.message()));
      }
    }
  }
  Apply(e);
}

void Coordinator::OfferPlaces(absl::Time now) {
  // Offers that lapsed: the worker is idle again (and may be offered again).
  std::map<std::string, int> preparing;  // by job
  for (const auto& [id, member] : members_.workers()) {
    if (!member.preparing) continue;
    WorkerMember& w = *members_.FindWorker(id);
    Job* job = FindJob(w.job_id);
    if (now > w.prepare_until || job == nullptr ||
        job->phase == JobPhase::kFinishing || !job->running()) {
      w.preparing = false;
      w.job_id.clear();
    } else {
      ++preparing[w.job_id];
    }
  }
  // A running job with room offers idle workers a place; they join its
  // next generation once they have loaded its data (WorkerHeartbeat).
  for (const std::string& job_id : job_order_) {
    Job& job = *jobs_[job_id];
    if (!job.running() || job.phase == JobPhase::kFinishing) continue;
    const int max = job.spec().workers().max();
    for (const std::string& id : members_.IdleWorkers(job_id, job.external())) {
      if (static_cast<int>(job.members.size()) + preparing[job_id] >= max)
        break;
      WorkerMember& w = *members_.FindWorker(id);
      if (w.declined.count(job_id)) continue;
      w.job_id = job_id;
      w.preparing = true;
      w.prepare_until = now + options_.prepare_timeout;
      ++preparing[job_id];
    }
  }
}

// After a coordinator restart a job waits (up to a lease) until its
// generation's members are back; the ones that are not were lost.
bool Coordinator::ReadyForRound(Job& job, absl::Time now, Effects* e) {
  if (job.phase == JobPhase::kRecovering) {
    bool all_back = true;
    for (const std::string& w : job.status.workers())
      all_back = all_back && members_.FindWorker(w) != nullptr;
    for (const std::string& sh : job.status.shards())
      all_back = all_back && members_.FindShard(sh) != nullptr;
    if (!all_back && now < job.recover_after) return false;
    for (const std::string& w : job.generation_workers()) {
      if (members_.FindWorker(w) == nullptr) DropMember(job, w, "lost");
    }
    for (const std::string& sh : std::vector<std::string>(
             job.status.shards().begin(), job.status.shards().end())) {
      if (members_.FindShard(sh) == nullptr) LoseShard(sh);
    }
    job.SetPhase(JobPhase::kRunning);
    job.next.force = true;  // rebuild the chunk table from the ledger
  }
  if (job.phase != JobPhase::kRunning || job.members.empty()) return false;
  // Members that lapsed together (all paused, a link that healed) come back
  // within moments of each other: once one is back, wait for the others
  // rather than run a round without them and another with them.
  for (auto it = job.lapsed.begin(); it != job.lapsed.end();) {
    if (!members_.LapsedWorker(*it)) {
      it = job.lapsed.erase(it);  // back, left, or forgotten
    } else if (now < job.rejoin_until) {
      return false;
    } else {
      ++it;
    }
  }
  // Members that went silent together expire a tick or more apart: once
  // one lapsed, the others silent for two heartbeats are waited for (they
  // speak again or expire, within a lease), rather than run a generation
  // without the first and then another without all of them.
  if (now - job.lapsed_at < options_.lease) {
    for (const std::string& id : job.members) {
      const WorkerMember* w = members_.FindWorker(id);
      if (w != nullptr && now - w->last_heartbeat > SilentAfter()) return false;
    }
  }
  return job.members != job.generation_workers() ||
         !job.next.missing_shards.empty() || job.next.restore ||
         !job.next.fresh_shards.empty() || job.next.force;
}

// Replaces lost shards: a shard at the lost one's address (the process
// restarted) first, else the least loaded one not in this job.
bool Coordinator::ReplaceLostShards(Job& job) {
  for (int index : std::set<int>(job.next.missing_shards)) {
    std::optional<ShardCandidate> best = ReplacementShard(
        members_.Candidates(ShardLoad()), job.shard_addresses[index],
        {job.status.shards().begin(), job.status.shards().end()},
        job.shard_bytes);
    if (!best.has_value()) {
      job.status.set_message(
          absl::StrCat("waiting for a shard to replace shard ", index, " (",
                       job.shard_addresses[index], ")"));
      return false;
    }
    job.status.set_shards(index, best->id);
    job.shard_addresses[index] = best->address;
    job.next.missing_shards.erase(index);
    job.next.fresh_shards.insert(index);
    AddEvent(job, "joined", best->id);
  }
  return true;
}

RoundPlan Coordinator::PlanRound(Job& job) {
  RoundPlan plan;
  plan.job_id = job.id();
  plan.generation = job.status.generation() + 1;
  plan.workers = job.members;
  plan.addresses = job.shard_addresses;
  plan.restore = job.next.restore;
  plan.bad_checkpoints = job.bad_checkpoints;
  for (int index : job.next.fresh_shards) {
    v1::InitJobRequest request;
    request.set_job_id(job.id());
    *request.mutable_spec() = job.spec();
    request.set_shard_index(index);
    request.set_num_shards(job.spec().shards());
    request.set_generation(plan.generation);
    for (const std::string& w : plan.workers) request.add_workers(w);
    plan.inits.emplace_back(job.shard_addresses[index], std::move(request));
  }
  job.SetPhase(JobPhase::kReconfiguring);
  return plan;
}

void Coordinator::PlanRounds(absl::Time now, Effects* e) {
  for (const std::string& job_id : job_order_) {
    Job& job = *jobs_[job_id];
    if (!ReadyForRound(job, now, e) || !ReplaceLostShards(job)) continue;
    e->tasks.push_back(
        [this, plan = PlanRound(job)] { RunRoundTask(std::move(plan)); });
  }
}

void Coordinator::RunRoundTask(RoundPlan plan) {
  absl::StatusOr<RoundResult> result = RunRound(plan, shards_);
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    if (result.ok()) {
      CommitRound(plan, *result);
    } else {
      AbandonRound(plan, result.status());
    }
    Job* job = FindJob(plan.job_id);
    if (job != nullptr && (result.ok() || BadCheckpoint(result.status()) > 0))
      ticket = Persist(*job);
  }
  Sync(ticket).IgnoreError();
}

void Coordinator::CommitRound(const RoundPlan& plan, const RoundResult& r) {
  Job* job = FindJob(plan.job_id);
  if (job == nullptr || !job->running()) return;
  if (job->phase == JobPhase::kReconfiguring) job->SetPhase(JobPhase::kRunning);
  const std::vector<std::string> before = job->generation_workers();
  job->status.set_generation(plan.generation);
  job->status.mutable_workers()->Assign(plan.workers.begin(),
                                        plan.workers.end());
  job->next.fresh_shards.clear();
  job->next.force = false;
  if (plan.restore) {
    job->next.restore = false;
    AddEvent(*job, "restored", "", r.restore_step);
  }
  for (const std::string& w : plan.workers) {
    if (std::find(before.begin(), before.end(), w) == before.end())
      AddEvent(*job, "joined", w, r.align_version);
  }
  job->ledger = r.ledger;
  if (job->chunks != nullptr) job->chunks->Rebuild(job->ledger);
  job->awaiting_values = job->external() ? r.awaiting_values : std::set<int>();
  job->status.set_message("");
  std::cerr << "fulcrum-coordinator: job " << plan.job_id << " at generation "
            << plan.generation << " with " << absl::StrJoin(plan.workers, ", ")
            << " from version " << r.align_version
            << (plan.restore
                    ? absl::StrCat(" (restored checkpoint ", r.restore_step, ")")
                    : "")
            << "\n";
}

void Coordinator::AbandonRound(const RoundPlan& plan,
                               const absl::Status& status) {
  std::cerr << "fulcrum-coordinator: job " << plan.job_id << " generation "
            << plan.generation << " not reached, will retry: " << status
            << "\n";
  Job* job = FindJob(plan.job_id);
  // A job that ended while the round ran keeps its end's message (a
  // fail_job reason was overwritten by the shards' "job has ended").
  if (job == nullptr || !job->running()) return;
  if (job->phase == JobPhase::kReconfiguring) job->SetPhase(JobPhase::kRunning);
  const int64_t bad = BadCheckpoint(status);
  if (bad > 0) {
    job->bad_checkpoints.insert(bad);
    AddEvent(*job, "checkpoint_rejected", "", bad);
  }
  job->status.set_message(absl::StrCat("reconfiguring to generation ",
                                       plan.generation, ": ",
                                       status.message()));
}

void Coordinator::Finish(Job& job, v1::JobState state,
                         const std::string& message, Effects* e) {
  if (job.phase == JobPhase::kEnded) return;
  const bool had_shards = job.running() || job.phase == JobPhase::kStarting;
  // Keep what rank 0 last reported: once ended, the status stops reading
  // the workers' heartbeats (a cancelled job showed step 0).
  if (job.status.workers_size() > 0) {
    const WorkerMember* w = members_.FindWorker(job.status.workers(0));
    if (w != nullptr && w->job_id == job.id() &&
        w->progress.step() > job.status.progress().step()) {
      *job.status.mutable_progress() = w->progress;
    }
  }
  // And what the job trained, so that it survives a restart (the samples
  // map and the chunk table are not persisted).
  job.status.mutable_progress()->set_samples_total(
      std::max(SamplesTrained(job), job.status.progress().samples_total()));
  if (job.chunks != nullptr) FillEpochs(job, &job.status);
  job.SetPhase(JobPhase::kEnded, state);
  job.status.set_message(message);
  job.status.set_end_time_unix(Unix(options_.env->Now()));
  e->journal_ticket = std::max(e->journal_ticket, Persist(job));
  if (!had_shards) return;
  for (const std::string& address : job.shard_addresses)
    e->ends.emplace_back(address, job.id());
}

void Coordinator::DropMember(Job& job, const std::string& worker,
                             const std::string& kind) {
  auto it = std::find(job.members.begin(), job.members.end(), worker);
  if (it == job.members.end() && !job.in_generation(worker)) return;
  if (it != job.members.end()) job.members.erase(it);
  AddEvent(job, kind, worker);
  if (job.chunks != nullptr) job.chunks->Release(worker);
  if (job.members.empty() && job.running() &&
      job.phase != JobPhase::kFinishing) {
    job.status.set_message("waiting for workers: every member is gone");
  }
}

void Coordinator::LoseShard(const std::string& id) {
  for (auto& [job_id, job] : jobs_) {
    if (!job->running()) continue;
    for (int i = 0; i < job->status.shards_size(); ++i) {
      if (job->status.shards(i) != id) continue;
      AddEvent(*job, "lost", id);
      job->next.missing_shards.insert(i);
      job->next.restore = true;
      job->status.set_message(absl::StrCat(
          "shard ", id, " lost: recovering from the last complete checkpoint"));
    }
  }
}

void Coordinator::AddEvent(Job& job, const std::string& kind,
                           const std::string& member, int64_t step) {
  constexpr int kMaxEvents = 100;
  auto* events = job.status.mutable_events();
  if (events->size() >= kMaxEvents)
    events->DeleteSubrange(0, events->size() - kMaxEvents + 1);
  v1::MembershipEvent* e = events->Add();
  e->set_time_unix(Unix(options_.env->Now()));
  e->set_kind(kind);
  e->set_member_id(member);
  e->set_generation(job.status.generation());
  e->set_step(step);
}

}  // namespace fulcrum
