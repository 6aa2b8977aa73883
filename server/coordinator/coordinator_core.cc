#include "server/coordinator/coordinator_core.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/job_spec.h"

namespace fulcrum {
namespace {

double Unix(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

template <typename Repeated>
std::vector<std::string> ToVector(const Repeated& r) {
  return std::vector<std::string>(r.begin(), r.end());
}

// Narrows `common` to the steps also in `steps`; the first call (first =
// true) starts it. Complete checkpoints are the steps every shard has.
template <typename Steps>
void IntersectSteps(const Steps& steps, bool first, std::set<int64_t>* common) {
  std::set<int64_t> here(steps.begin(), steps.end());
  if (first) {
    *common = std::move(here);
    return;
  }
  for (auto it = common->begin(); it != common->end();)
    it = here.count(*it) ? std::next(it) : common->erase(it);
}

}  // namespace

Coordinator::Coordinator(Options options, ShardControl* shards)
    : options_(std::move(options)), shards_(shards) {}

Coordinator::~Coordinator() { Stop(); }

void Coordinator::Start() {
  ticker_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.tick)) Tick();
  });
}

void Coordinator::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
}

bool Coordinator::Terminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

void Coordinator::Tick() {
  std::vector<EndCall> ends;
  std::vector<Launch> launches;
  std::vector<std::string> lost;
  std::vector<Round> rounds;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.now();
    ExpireLeases(now, &lost);
    Schedule(now, &launches);
    Grow(now);
    PlanRounds(now, &rounds);
  }
  if (options_.on_member_lost) {
    for (const std::string& role : lost) options_.on_member_lost(role);
  }
  RunEnds(ends);
  for (const Launch& launch : launches) {
    absl::Status status;
    for (const auto& [address, request] : launch.inits) {
      status = shards_->InitJob(address, request);
      if (!status.ok()) {
        status = absl::Status(
            status.code(),
            absl::StrCat("shard ", address, ": ", status.message()));
        break;
      }
    }
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(launch.job_id);
    if (it == jobs_.end()) continue;
    Job& job = it->second;
    job.starting = false;
    if (job.status.state() != v1::PENDING) {  // cancelled meanwhile
      for (const std::string& w : job.status.workers()) {
        auto wi = workers_.find(w);
        if (wi != workers_.end() && wi->second.job_id == launch.job_id)
          wi->second.job_id.clear();
      }
      continue;
    }
    if (status.ok()) {
      job.status.set_state(v1::RUNNING);
      job.status.set_generation(1);
      job.status.set_start_time_unix(Unix(options_.now()));
      job.status.set_message("");
      job.members = ToVector(job.status.workers());
      for (const std::string& w : job.status.workers())
        AddEvent(job, "joined", w);
      for (const std::string& s : job.status.shards())
        AddEvent(job, "joined", s);
      Persist(job).IgnoreError();
      continue;
    }
    // Could not initialise the shards: release the workers and retry later,
    // unless the shard rejected the job itself.
    for (const std::string& w : job.status.workers()) {
      auto wi = workers_.find(w);
      if (wi != workers_.end()) wi->second.job_id.clear();
    }
    job.status.clear_workers();
    job.status.clear_shards();
    job.shard_addresses.clear();
    if (status.code() == absl::StatusCode::kInvalidArgument ||
        status.code() == absl::StatusCode::kFailedPrecondition) {
      std::vector<EndCall> none;
      Finish(job, v1::FAILED, std::string(status.message()), &none);
    } else {
      job.status.set_message(
          absl::StrCat("starting failed, will retry: ", status.message()));
    }
  }
  for (const Round& round : rounds) RunRound(round);
}

void Coordinator::DropMember(Job& job, const std::string& worker,
                             const std::string& kind) {
  auto it = std::find(job.members.begin(), job.members.end(), worker);
  const bool member =
      it != job.members.end() || Contains(ToVector(job.status.workers()), worker);
  if (!member) return;
  if (it != job.members.end()) job.members.erase(it);
  AddEvent(job, kind, worker);
  for (auto& [id, chunk] : job.chunks) {
    if (chunk.holder == worker) chunk.holder.clear();
  }
  if (job.members.empty() && job.status.state() == v1::RUNNING &&
      !job.finishing) {
    job.status.set_message("waiting for workers: every member is gone");
  }
}

void Coordinator::LoseShard(const std::string& id) {
  for (auto& [job_id, job] : jobs_) {
    if (job.status.state() != v1::RUNNING) continue;
    for (int i = 0; i < job.status.shards_size(); ++i) {
      if (job.status.shards(i) != id) continue;
      AddEvent(job, "lost", id);
      job.missing_shards.insert(i);
      job.restore = true;
      job.status.set_message(absl::StrCat(
          "shard ", id, " lost: recovering from the last complete checkpoint"));
    }
  }
}

void Coordinator::ExpireLeases(absl::Time now,
                               std::vector<std::string>* lost) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (now - it->second.last_heartbeat <= options_.lease) {
      ++it;
      continue;
    }
    const std::string job_id = it->second.job_id;
    const std::string id = it->first;
    gone_.insert(id);
    it = workers_.erase(it);
    lost->push_back("worker");
    auto job = jobs_.find(job_id);
    if (job != jobs_.end() && job->second.status.state() == v1::RUNNING)
      DropMember(job->second, id, "lost");
  }
  for (auto it = shard_members_.begin(); it != shard_members_.end();) {
    if (now - it->second.last_heartbeat <= options_.lease) {
      ++it;
      continue;
    }
    const std::string id = it->first;
    gone_.insert(id);
    it = shard_members_.erase(it);
    lost->push_back("shard");
    LoseShard(id);
  }
}

std::vector<std::string> Coordinator::IdleWorkers() const {
  std::vector<std::string> idle;
  for (const auto& [id, w] : workers_) {
    if (w.job_id.empty()) idle.push_back(id);
  }
  return idle;
}

void Coordinator::Grow(absl::Time now) {
  // Offers that lapsed: the worker is idle again (and may be offered again).
  std::map<std::string, int> preparing;  // by job
  for (auto& [id, w] : workers_) {
    if (!w.preparing) continue;
    auto job = jobs_.find(w.job_id);
    if (now > w.prepare_until || job == jobs_.end() ||
        job->second.status.state() != v1::RUNNING || job->second.finishing) {
      w.preparing = false;
      w.job_id.clear();
    } else {
      ++preparing[w.job_id];
    }
  }
  // A running job with room offers idle workers a place; they join its
  // next generation once they have loaded its data (WorkerHeartbeat).
  for (const std::string& job_id : job_order_) {
    Job& job = jobs_[job_id];
    if (job.status.state() != v1::RUNNING || job.finishing) continue;
    const int max = job.status.spec().workers().max();
    for (const std::string& id : IdleWorkers()) {
      if (static_cast<int>(job.members.size()) + preparing[job_id] >= max)
        break;
      Worker& w = workers_[id];
      if (w.declined.count(job_id)) continue;
      w.job_id = job_id;
      w.preparing = true;
      w.prepare_until = now + options_.prepare_timeout;
      ++preparing[job_id];
    }
  }
}

void Coordinator::PlanRounds(absl::Time now, std::vector<Round>* rounds) {
  for (const std::string& job_id : job_order_) {
    Job& job = jobs_[job_id];
    if (job.status.state() != v1::RUNNING || job.round_in_flight ||
        job.finishing || (job.members.empty() && !job.recovering)) {
      continue;
    }
    if (job.recovering) {
      // After a coordinator restart: wait (up to a lease) until the
      // generation's members are back; the ones that are not were lost.
      bool all_back = true;
      for (const std::string& w : job.status.workers())
        all_back = all_back && workers_.count(w);
      for (const std::string& sh : job.status.shards())
        all_back = all_back && shard_members_.count(sh);
      if (!all_back && now < job.recover_after) continue;
      for (const std::string& w : ToVector(job.status.workers())) {
        if (!workers_.count(w)) DropMember(job, w, "lost");
      }
      for (const std::string& sh : ToVector(job.status.shards())) {
        if (!shard_members_.count(sh)) LoseShard(sh);
      }
      job.recovering = false;
      job.force_round = true;  // rebuild the chunk table from the ledger
      if (job.members.empty()) continue;
    }
    const bool changed = job.members != ToVector(job.status.workers());
    if (!changed && job.missing_shards.empty() && !job.restore &&
        job.fresh_shards.empty() && !job.force_round) {
      continue;
    }
    // Replace lost shards: a shard at the lost one's address (the process
    // restarted) first, else the least loaded one not in this job.
    bool placed = true;
    for (int index : std::set<int>(job.missing_shards)) {
      std::map<std::string, int> load;
      for (const auto& [id, s] : shard_members_) load[id] = 0;
      for (const auto& [id, j] : jobs_) {
        if (j.status.state() != v1::RUNNING && !j.starting) continue;
        for (const std::string& s : j.status.shards())
          if (load.count(s)) ++load[s];
      }
      std::string best;
      for (const auto& [id, s] : shard_members_) {
        if (Contains(ToVector(job.status.shards()), id)) continue;
        if (s.address == job.shard_addresses[index]) {
          best = id;
          break;
        }
        if (best.empty() || load[id] < load[best]) best = id;
      }
      if (best.empty()) {
        placed = false;
        job.status.set_message(absl::StrCat(
            "waiting for a shard to replace shard ", index, " (",
            job.shard_addresses[index], ")"));
        break;
      }
      job.status.set_shards(index, best);
      job.shard_addresses[index] = shard_members_[best].address;
      job.missing_shards.erase(index);
      job.fresh_shards.insert(index);
      AddEvent(job, "joined", best);
    }
    if (!placed) continue;
    Round round;
    round.job_id = job_id;
    round.generation = job.status.generation() + 1;
    round.workers = job.members;
    round.addresses = job.shard_addresses;
    round.restore = job.restore;
    round.bad_checkpoints = job.bad_checkpoints;
    for (int index : job.fresh_shards) {
      v1::InitJobRequest request;
      request.set_job_id(job_id);
      *request.mutable_spec() = job.status.spec();
      request.set_shard_index(index);
      request.set_num_shards(job.status.spec().shards());
      request.set_generation(round.generation);
      for (const std::string& w : round.workers) request.add_workers(w);
      round.inits.emplace_back(job.shard_addresses[index], std::move(request));
    }
    job.round_in_flight = true;
    rounds->push_back(std::move(round));
  }
}

void Coordinator::RunRound(const Round& round) {
  int64_t restore_step = 0;
  auto abandon = [&](const absl::Status& status, bool bad_checkpoint) {
    std::cerr << "fulcrum-coordinator: job " << round.job_id
              << " generation " << round.generation
              << " not reached, will retry: " << status << "\n";
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(round.job_id);
    if (it == jobs_.end()) return;
    it->second.round_in_flight = false;
    if (bad_checkpoint) {
      it->second.bad_checkpoints.insert(restore_step);
      AddEvent(it->second, "checkpoint_rejected", "", restore_step);
      Persist(it->second).IgnoreError();
    }
    it->second.status.set_message(absl::StrCat(
        "reconfiguring to generation ", round.generation, ": ",
        status.message()));
  };
  for (const auto& [address, request] : round.inits) {
    absl::Status s = shards_->InitJob(address, request);
    // Already there (a retried round): the Reconfigure below sets it up.
    if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) {
      return abandon(absl::Status(s.code(), absl::StrCat("shard ", address,
                                                         ": ", s.message())),
                     false);
    }
  }
  v1::ReconfigureRequest request;
  request.set_job_id(round.job_id);
  request.set_generation(round.generation);
  for (const std::string& w : round.workers) request.add_workers(w);
  request.set_align_version(-1);
  if (round.restore) {
    // Which checkpoints every shard has on disk now (heartbeats lag): the
    // newest of them that has not failed to load is the one to restore.
    std::set<int64_t> common;
    for (size_t i = 0; i < round.addresses.size(); ++i) {
      absl::StatusOr<v1::ReconfigureResponse> r =
          shards_->Reconfigure(round.addresses[i], request);
      if (!r.ok()) {
        return abandon(absl::Status(r.status().code(),
                                    absl::StrCat("shard ", round.addresses[i],
                                                 ": ", r.status().message())),
                       false);
      }
      IntersectSteps(r->checkpoint_steps(), i == 0, &common);
    }
    for (auto it = common.rbegin(); it != common.rend(); ++it) {
      if (!round.bad_checkpoints.count(*it)) {
        restore_step = *it;
        break;
      }
    }
    request.set_restore(true);
    request.set_restore_step(restore_step);
  }
  int64_t align = INT64_MAX;
  for (const std::string& address : round.addresses) {
    absl::StatusOr<v1::ReconfigureResponse> r =
        shards_->Reconfigure(address, request);
    if (!r.ok()) {
      const bool bad = round.restore && restore_step > 0 &&
                       (r.status().code() == absl::StatusCode::kDataLoss ||
                        r.status().code() == absl::StatusCode::kNotFound);
      return abandon(
          absl::Status(r.status().code(), absl::StrCat("shard ", address, ": ",
                                                       r.status().message())),
          bad);
    }
    align = std::min(align, r->min_version());
  }
  request.set_align_version(align == INT64_MAX ? 0 : align);
  request.set_restore(false);
  request.set_restore_step(0);
  std::map<int64_t, v1::LedgerEntry> ledger;
  for (const std::string& address : round.addresses) {
    absl::StatusOr<v1::ReconfigureResponse> r =
        shards_->Reconfigure(address, request);
    if (!r.ok()) {
      return abandon(
          absl::Status(r.status().code(), absl::StrCat("shard ", address, ": ",
                                                       r.status().message())),
          false);
    }
    if (r->has_ledger()) {
      for (const v1::LedgerEntry& e : r->ledger()) ledger[e.chunk()] = e;
    }
  }
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(round.job_id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  job.round_in_flight = false;
  if (job.status.state() != v1::RUNNING) return;
  const std::vector<std::string> before = ToVector(job.status.workers());
  job.status.set_generation(round.generation);
  job.status.mutable_workers()->Assign(round.workers.begin(),
                                       round.workers.end());
  job.fresh_shards.clear();
  if (round.restore) {
    job.restore = false;
    AddEvent(job, "restored", "", restore_step);
  }
  for (const std::string& w : round.workers) {
    if (!Contains(before, w)) AddEvent(job, "joined", w, align);
  }
  job.ledger = std::move(ledger);
  RebuildChunks(job);
  job.force_round = false;
  job.status.set_message("");
  Persist(job).IgnoreError();
  std::cerr << "fulcrum-coordinator: job " << round.job_id << " at generation "
            << round.generation << " with "
            << absl::StrJoin(round.workers, ", ") << " from version " << align
            << (round.restore
                    ? absl::StrCat(" (restored checkpoint ", restore_step, ")")
                    : "")
            << "\n";
}

int64_t Coordinator::ChunksPerEpoch(const Job& job) {
  const int64_t size = job.status.spec().dataset().chunk_size();
  return (job.dataset_size + size - 1) / size;
}

void Coordinator::EnsureEpoch(Job& job, int64_t epoch) {
  if (job.dataset_size <= 0) return;
  const int64_t per = ChunksPerEpoch(job);
  const int64_t size = job.status.spec().dataset().chunk_size();
  if (job.chunks.count(epoch * per)) return;
  for (int64_t i = 0; i < per; ++i) {
    Chunk c;
    c.begin = i * size;
    c.end = std::min(c.begin + size, job.dataset_size);
    c.next = c.begin;
    job.chunks[epoch * per + i] = c;
  }
}

void Coordinator::RebuildChunks(Job& job) {
  if (job.dataset_size <= 0) return;
  const int64_t per = ChunksPerEpoch(job);
  for (const auto& [id, entry] : job.ledger) EnsureEpoch(job, id / per);
  for (auto& [id, c] : job.chunks) {
    c.holder.clear();
    auto e = job.ledger.find(id);
    c.next = e == job.ledger.end()
                 ? c.begin
                 : std::clamp<int64_t>(e->second.end(), c.begin, c.end);
    c.done = c.next >= c.end;
  }
}

absl::StatusOr<v1::LeaseChunkResponse> Coordinator::LeaseChunk(
    const v1::LeaseChunkRequest& request) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job_id '", request.job_id(), "' not found"));
  }
  Job& job = it->second;
  auto w = workers_.find(request.worker_id());
  if (job.recovering ||
      (w == workers_.end() && Adoptable(request.worker_id(), "w-"))) {
    return absl::UnavailableError(
        "the coordinator restarted and is re-adopting the job's members; "
        "retry");
  }
  if (w == workers_.end() ||
      !Contains(ToVector(job.status.workers()), request.worker_id())) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker_id '", request.worker_id(),
                     "' is not a member of ", request.job_id()));
  }
  if (job.status.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " is ",
                     v1::JobState_Name(job.status.state())));
  }
  if (request.generation() != job.status.generation()) {
    return absl::AbortedError(absl::StrCat(
        "generation ", request.generation(), " is stale: job ",
        request.job_id(), " is at generation ", job.status.generation(),
        "; re-join"));
  }
  if (job.status.spec().dataset().sharding() != "chunks") {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(),
                     " uses dataset.sharding '",
                     job.status.spec().dataset().sharding(), "', not chunks"));
  }
  if (request.dataset_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset_size must be > 0, got ", request.dataset_size()));
  }
  if (job.dataset_size < 0) {
    job.dataset_size = request.dataset_size();
    EnsureEpoch(job, 0);
    RebuildChunks(job);
  } else if (job.dataset_size != request.dataset_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset_size ", request.dataset_size(), " differs from ",
        job.dataset_size, " reported by other workers of ", request.job_id()));
  }
  w->second.last_heartbeat = options_.now();
  for (int64_t id : request.done()) {
    auto c = job.chunks.find(id);
    if (c != job.chunks.end() && c->second.holder == request.worker_id()) {
      c->second.holder.clear();
      c->second.done = true;
      c->second.next = c->second.end;
    }
  }
  const int64_t per = ChunksPerEpoch(job);
  v1::LeaseChunkResponse response;
  auto lease = [&](int64_t id, Chunk& c) {
    c.holder = request.worker_id();
    v1::DataRange* r = response.mutable_chunk();
    r->set_chunk(id);
    r->set_begin(c.next);
    r->set_end(c.end);
    response.set_epoch(static_cast<int32_t>(id / per));
  };
  for (auto& [id, c] : job.chunks) {  // a lease the worker already holds
    if (c.holder == request.worker_id()) {
      lease(id, c);
      return response;
    }
  }
  bool all_done = true;
  for (int64_t epoch = 0; epoch < job.status.spec().epochs(); ++epoch) {
    EnsureEpoch(job, epoch);
    for (int64_t id = epoch * per; id < (epoch + 1) * per; ++id) {
      Chunk& c = job.chunks[id];
      if (c.done) continue;
      all_done = false;
      if (c.holder.empty()) {
        lease(id, c);
        return response;
      }
    }
  }
  response.set_exhausted(all_done);
  return response;
}

void Coordinator::Schedule(absl::Time now, std::vector<Launch>* launches) {
  for (const std::string& job_id : job_order_) {
    Job& job = jobs_[job_id];
    if (job.status.state() != v1::PENDING || job.starting) continue;
    const v1::JobSpec& spec = job.status.spec();
    std::vector<std::string> idle = IdleWorkers();
    if (static_cast<int>(idle.size()) < spec.workers().min() ||
        static_cast<int>(shard_members_.size()) < spec.shards()) {
      job.ready_since = absl::InfinitePast();
      continue;
    }
    if (job.ready_since == absl::InfinitePast()) job.ready_since = now;
    if (static_cast<int>(idle.size()) < spec.workers().max() &&
        now - job.ready_since < options_.start_grace) {
      continue;  // give more workers a moment to register
    }
    idle.resize(std::min<size_t>(idle.size(), spec.workers().max()));
    // Shards: the least loaded by running jobs, then by id.
    std::map<std::string, int> load;
    for (const auto& [id, s] : shard_members_) load[id] = 0;
    for (const auto& [id, j] : jobs_) {
      if (j.status.state() != v1::RUNNING && !j.starting) continue;
      for (const std::string& s : j.status.shards()) ++load[s];
    }
    std::vector<std::string> shard_ids;
    for (const auto& [id, n] : load) {
      if (shard_members_.count(id)) shard_ids.push_back(id);
    }
    std::stable_sort(shard_ids.begin(), shard_ids.end(),
                     [&](const std::string& a, const std::string& b) {
                       return load[a] < load[b];
                     });
    shard_ids.resize(spec.shards());
    job.starting = true;
    job.status.clear_workers();
    job.status.clear_shards();
    job.shard_addresses.clear();
    for (const std::string& w : idle) {
      workers_[w].job_id = job_id;
      job.status.add_workers(w);
    }
    Launch launch{job_id, {}};
    for (int i = 0; i < spec.shards(); ++i) {
      const Shard& s = shard_members_[shard_ids[i]];
      job.status.add_shards(s.id);
      job.shard_addresses.push_back(s.address);
      v1::InitJobRequest request;
      request.set_job_id(job_id);
      *request.mutable_spec() = spec;
      request.set_shard_index(i);
      request.set_num_shards(spec.shards());
      request.set_generation(1);
      for (const std::string& w : idle) request.add_workers(w);
      launch.inits.emplace_back(s.address, std::move(request));
    }
    launches->push_back(std::move(launch));
  }
}

void Coordinator::Finish(Job& job, v1::JobState state,
                         const std::string& message,
                         std::vector<EndCall>* ends) {
  if (Terminal(job.status.state())) return;
  const bool had_shards = job.status.state() == v1::RUNNING || job.starting;
  job.status.set_state(state);
  job.status.set_message(message);
  job.status.set_end_time_unix(Unix(options_.now()));
  Persist(job).IgnoreError();
  if (had_shards) {
    for (const std::string& address : job.shard_addresses) {
      ends->push_back({address, job.status.job_id()});
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
  e->set_time_unix(Unix(options_.now()));
  e->set_kind(kind);
  e->set_member_id(member);
  e->set_generation(job.status.generation());
  e->set_step(step);
}

void Coordinator::RunEnds(const std::vector<EndCall>& ends) {
  for (const EndCall& e : ends) shards_->EndJob(e.address, e.job_id);
}

absl::StatusOr<std::string> Coordinator::SubmitJob(v1::JobSpec spec) {
  ApplyDefaults(&spec);
  absl::Status valid = ValidateJobSpec(spec);
  if (!valid.ok()) return valid;
  absl::MutexLock lock(&mu_);
  const std::string id = absl::StrCat("job-", next_job_++);
  Job& job = jobs_[id];
  job.status.set_job_id(id);
  *job.status.mutable_spec() = std::move(spec);
  job.status.set_state(v1::PENDING);
  job.status.set_submit_time_unix(Unix(options_.now()));
  absl::Status durable = Persist(job);
  if (!durable.ok()) {
    jobs_.erase(id);
    --next_job_;
    return absl::UnavailableError(absl::StrCat(
        "cannot record the job durably: ", durable.message()));
  }
  PersistCounters();
  job_order_.push_back(id);
  return id;
}

void Coordinator::RefreshProgress(Job& job) const {
  job.status.clear_preparing();
  for (const auto& [id, w] : workers_) {
    if (w.preparing && w.job_id == job.status.job_id())
      job.status.add_preparing(id);
  }
  int live = 0;
  double rate = 0;
  const bool running = job.status.state() == v1::RUNNING;
  for (int rank = 0; rank < job.status.workers_size(); ++rank) {
    auto it = workers_.find(job.status.workers(rank));
    if (it == workers_.end() || it->second.job_id != job.status.job_id())
      continue;
    if (running) ++live;
    rate += it->second.progress.samples_per_sec();
    // While running, rank 0's latest heartbeat speaks for the job.
    if (running && rank == 0 &&
        it->second.progress.step() >= job.status.progress().step()) {
      *job.status.mutable_progress() = it->second.progress;
    }
  }
  job.status.set_live_workers(live);
  job.status.mutable_shard_addresses()->Assign(job.shard_addresses.begin(),
                                               job.shard_addresses.end());
  if (running) job.status.mutable_progress()->set_samples_per_sec(rate);
  // A checkpoint is complete once every shard index has it on disk.
  job.status.clear_checkpoint_steps();
  std::set<int64_t> common;
  for (int i = 0; i < job.status.shards_size(); ++i) {
    auto it = job.checkpoint_steps.find(i);
    IntersectSteps(it == job.checkpoint_steps.end() ? std::vector<int64_t>()
                                                    : it->second,
                   i == 0, &common);
  }
  for (int64_t s : common) job.status.add_checkpoint_steps(s);
  job.status.set_checkpoint_step(common.empty() ? 0 : *common.rbegin());
  // Samples per epoch, from the shards' ledger: what the parameters hold.
  job.status.clear_epochs();
  if (job.dataset_size > 0) {
    const int64_t per = ChunksPerEpoch(job);
    int64_t last_epoch = -1;
    if (!job.chunks.empty()) last_epoch = job.chunks.rbegin()->first / per;
    if (!job.ledger.empty())
      last_epoch = std::max(last_epoch, job.ledger.rbegin()->first / per);
    for (int64_t e = 0; e <= last_epoch; ++e) {
      v1::EpochSamples* out = job.status.add_epochs();
      out->set_epoch(static_cast<int32_t>(e));
      out->set_total(job.dataset_size);
    }
    for (const auto& [id, entry] : job.ledger) {
      v1::EpochSamples* out = job.status.mutable_epochs(id / per);
      out->set_trained(out->trained() + entry.samples());
    }
  }
  job.status.clear_stalls();
  if (running) {
    for (const auto& [shard, stalls] : job.stalls) {
      for (const v1::Stall& s : stalls) *job.status.add_stalls() = s;
    }
  }
  int64_t samples = 0;
  for (const auto& [worker, n] : job.samples) samples += n;
  job.status.mutable_progress()->set_samples_total(samples);
  // Staleness over every shard's reads.
  v1::StalenessSummary* all = job.status.mutable_staleness();
  all->Clear();
  double sum = 0;
  for (const auto& [shard, s] : job.staleness) {
    all->set_reads(all->reads() + s.reads());
    all->set_max(std::max(all->max(), s.max()));
    sum += s.mean() * s.reads();
    for (int i = 0; i < s.histogram_size(); ++i) {
      if (i >= all->histogram_size()) all->add_histogram(0);
      all->set_histogram(i, all->histogram(i) + s.histogram(i));
    }
  }
  if (all->reads() > 0) all->set_mean(sum / all->reads());
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end())
    return absl::NotFoundError(absl::StrCat("job_id '", job_id, "' not found"));
  Job copy = it->second;
  RefreshProgress(copy);
  return copy.status;
}

std::vector<v1::JobStatus> Coordinator::ListJobs() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::JobStatus> out;
  for (const std::string& id : job_order_) {
    Job copy = jobs_.at(id);
    RefreshProgress(copy);
    out.push_back(copy.status);
  }
  return out;
}

absl::StatusOr<v1::JobStatus> Coordinator::CancelJob(
    const std::string& job_id) {
  std::vector<EndCall> ends;
  v1::JobStatus status;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end())
      return absl::NotFoundError(
          absl::StrCat("job_id '", job_id, "' not found"));
    Job& job = it->second;
    if (Terminal(job.status.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " already ended (",
                       v1::JobState_Name(job.status.state()), ")"));
    }
    Finish(job, v1::CANCELLED, "cancelled by user", &ends);
    status = job.status;
  }
  RunEnds(ends);
  return status;
}

v1::RegisterWorkerResponse Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  absl::MutexLock lock(&mu_);
  Worker w;
  w.id = NewMemberId("w-");
  w.hostname = request.hostname();
  w.device = request.device().empty() ? "cpu" : request.device();
  w.last_heartbeat = options_.now();
  v1::RegisterWorkerResponse response;
  response.set_worker_id(w.id);
  response.set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  workers_[w.id] = std::move(w);
  return response;
}

absl::StatusOr<v1::WorkerHeartbeatResponse> Coordinator::WorkerHeartbeat(
    const v1::WorkerHeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end() && Adoptable(request.worker_id(), "w-")) {
    // Issued before this coordinator restarted: take it back, with the job
    // it trains if it is a member of that job's generation.
    Worker w;
    w.id = request.worker_id();
    w.hostname = request.hostname();
    w.device = request.device().empty() ? "cpu" : request.device();
    auto job = jobs_.find(request.job_id());
    if (job != jobs_.end() &&
        (Contains(ToVector(job->second.status.workers()), w.id) ||
         Terminal(job->second.status.state()))) {
      w.job_id = request.job_id();
    }
    std::cerr << "fulcrum-coordinator: re-adopted worker " << w.id
              << (w.job_id.empty() ? "" : " of " + w.job_id) << "\n";
    it = workers_.emplace(w.id, std::move(w)).first;
  }
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker_id '", request.worker_id(),
                     "' is not registered (lease expired?): register again"));
  }
  Worker& w = it->second;
  w.last_heartbeat = options_.now();
  w.generation = request.generation();
  if (w.preparing && !request.prepared_job().empty() &&
      request.prepared_job() == w.job_id) {
    Job& job = jobs_.at(w.job_id);
    w.preparing = false;
    if (!request.prepare_error().empty()) {
      // It cannot load this job's data: not offered this job again.
      std::cerr << "fulcrum-coordinator: worker " << w.id
                << " cannot prepare " << w.job_id << ": "
                << request.prepare_error() << "\n";
      AddEvent(job, "failed", w.id);
      w.declined.insert(w.job_id);
      w.job_id.clear();
    } else if (job.status.state() == v1::RUNNING && !job.finishing &&
               static_cast<int>(job.members.size()) <
                   job.status.spec().workers().max()) {
      job.members.push_back(w.id);  // the next round takes it in
    } else {
      w.job_id.clear();  // the job ended or filled up meanwhile
    }
  }
  if (!request.job_id().empty() && request.job_id() == w.job_id) {
    w.progress = request.progress();
    jobs_.at(w.job_id).samples[w.id] = request.progress().samples_total();
  }
  v1::WorkerHeartbeatResponse response;
  if (w.job_id.empty()) return response;
  Job& job = jobs_.at(w.job_id);  // a worker's job always exists
  if (Terminal(job.status.state()) && request.job_id() != w.job_id) {
    w.job_id.clear();  // the worker has let go of the finished job
    return response;
  }
  if (job.status.state() == v1::PENDING) return response;  // still starting
  v1::WorkerAssignment* a = response.mutable_assignment();
  if (w.preparing) {
    a->set_job_id(w.job_id);
    *a->mutable_spec() = job.status.spec();
    a->set_job_state(job.status.state());
    a->set_prepare(true);
    return response;
  }
  // Joining: not in the generation the shards serve yet.
  if (!Contains(ToVector(job.status.workers()), w.id)) {
    response.clear_assignment();
    return response;
  }
  a->set_job_id(w.job_id);
  *a->mutable_spec() = job.status.spec();
  const auto& members = job.status.workers();
  a->set_rank(static_cast<int32_t>(
      std::find(members.begin(), members.end(), w.id) - members.begin()));
  a->set_world_size(members.size());
  a->set_generation(job.status.generation());
  for (const std::string& address : job.shard_addresses)
    a->add_shard_addresses(address);
  a->set_job_state(job.status.state());
  return response;
}

absl::StatusOr<v1::RegisterShardResponse> Coordinator::RegisterShard(
    const v1::RegisterShardRequest& request) {
  if (request.address().empty() ||
      request.address().find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address must be host:port, got '", request.address(), "'"));
  }
  absl::MutexLock lock(&mu_);
  // A shard registering at a member's address is that member restarted:
  // the old one is lost now, not when its lease runs out.
  for (auto it = shard_members_.begin(); it != shard_members_.end(); ++it) {
    if (it->second.address == request.address()) {
      const std::string old = it->first;
      gone_.insert(old);
      shard_members_.erase(it);
      std::cerr << "fulcrum-coordinator: shard " << old << " at "
                << request.address() << " restarted\n";
      LoseShard(old);
      break;
    }
  }
  Shard s;
  s.id = NewMemberId("s-");
  s.address = request.address();
  s.last_heartbeat = options_.now();
  v1::RegisterShardResponse response;
  response.set_shard_id(s.id);
  response.set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  shard_members_[s.id] = std::move(s);
  return response;
}

absl::StatusOr<v1::ShardHeartbeatResponse> Coordinator::ShardHeartbeat(
    const v1::ShardHeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  auto it = shard_members_.find(request.shard_id());
  if (it == shard_members_.end() && Adoptable(request.shard_id(), "s-") &&
      !request.address().empty()) {
    Shard s;
    s.id = request.shard_id();
    s.address = request.address();
    std::cerr << "fulcrum-coordinator: re-adopted shard " << s.id << " at "
              << s.address << "\n";
    it = shard_members_.emplace(s.id, std::move(s)).first;
  }
  if (it == shard_members_.end()) {
    return absl::NotFoundError(
        absl::StrCat("shard_id '", request.shard_id(),
                     "' is not registered (lease expired?): register again"));
  }
  it->second.last_heartbeat = options_.now();
  for (const v1::ShardJobStats& stats : request.jobs()) {
    auto job = jobs_.find(stats.job_id());
    if (job != jobs_.end()) {
      const auto& shards = job->second.status.shards();
      const int index = static_cast<int>(
          std::find(shards.begin(), shards.end(), it->first) - shards.begin());
      if (index < shards.size()) {
        job->second.checkpoint_steps[index].assign(
            stats.checkpoint_steps().begin(), stats.checkpoint_steps().end());
        if (stats.has_ledger() &&
            stats.generation() == job->second.status.generation()) {
          job->second.ledger.clear();
          for (const v1::LedgerEntry& e : stats.ledger())
            job->second.ledger[e.chunk()] = e;
        }
      }
      job->second.staleness[it->first] = stats.staleness();
      job->second.stalls[it->first].assign(stats.stalls().begin(),
                                           stats.stalls().end());
    }
  }
  v1::ShardHeartbeatResponse response;
  for (const auto& [id, job] : jobs_) {
    const auto& s = job.status.shards();
    if (!Terminal(job.status.state()) &&
        std::find(s.begin(), s.end(), it->first) != s.end()) {
      response.add_active_jobs(id);
    }
  }
  return response;
}

absl::Status Coordinator::Leave(const std::string& member_id) {
  std::vector<EndCall> ends;
  {
    absl::MutexLock lock(&mu_);
    auto w = workers_.find(member_id);
    if (w != workers_.end()) {
      auto job = jobs_.find(w->second.job_id);
      if (job != jobs_.end() && job->second.status.state() == v1::RUNNING)
        DropMember(job->second, member_id, "left");
      workers_.erase(w);
      gone_.insert(member_id);
    } else if (shard_members_.erase(member_id) == 0) {
      return absl::NotFoundError(
          absl::StrCat("member_id '", member_id, "' not found"));
    } else {
      LoseShard(member_id);
    }
  }
  RunEnds(ends);
  return absl::OkStatus();
}

absl::StatusOr<v1::ReportProgressResponse> Coordinator::ReportProgress(
    const v1::ReportProgressRequest& request) {
  std::vector<EndCall> ends;
  v1::ReportProgressResponse response;
  {
    absl::MutexLock lock(&mu_);
    auto w = workers_.find(request.worker_id());
    if (w == workers_.end() && Adoptable(request.worker_id(), "w-")) {
      Worker adopted;  // its report beat its heartbeat after a restart
      adopted.id = request.worker_id();
      adopted.device = "cpu";
      adopted.job_id = request.job_id();
      w = workers_.emplace(adopted.id, std::move(adopted)).first;
    }
    if (w == workers_.end()) {
      return absl::NotFoundError(
          absl::StrCat("worker_id '", request.worker_id(), "' not found"));
    }
    auto it = jobs_.find(request.job_id());
    if (it == jobs_.end()) {
      return absl::NotFoundError(
          absl::StrCat("job_id '", request.job_id(), "' not found"));
    }
    Job& job = it->second;
    const auto& members = job.status.workers();
    const auto pos =
        std::find(members.begin(), members.end(), request.worker_id());
    if (pos == members.end()) {
      return absl::PermissionDeniedError(
          absl::StrCat("worker ", request.worker_id(), " is not a member of ",
                       request.job_id()));
    }
    w->second.last_heartbeat = options_.now();
    w->second.progress = request.progress();
    job.samples[request.worker_id()] = request.progress().samples_total();
    if (pos == members.begin()) {  // rank 0 speaks for the job
      const double rate = job.status.progress().samples_per_sec();
      *job.status.mutable_progress() = request.progress();
      job.status.mutable_progress()->set_samples_per_sec(rate);
    }
    if (request.done()) job.finishing = true;
    if (!request.error().empty()) {
      // One worker failing costs its share of the work, not the job; the
      // job fails when no member is left.
      std::cerr << "fulcrum-coordinator: worker " << request.worker_id()
                << " failed " << request.job_id() << ": " << request.error()
                << "\n";
      if (job.status.state() == v1::RUNNING)
        DropMember(job, request.worker_id(), "failed");
      if (job.members.empty()) {
        Finish(job, v1::FAILED,
               absl::StrCat("worker ", request.worker_id(), ": ",
                            request.error()),
               &ends);
      }
    } else if (request.done() && pos == members.begin()) {
      const v1::Progress& p = request.progress();
      const double target = job.status.spec().target_accuracy();
      std::string message = absl::StrCat(
          "trained ", p.step(), " steps; test accuracy ", p.test_accuracy());
      if (target > 0) {
        absl::StrAppend(
            &message,
            p.test_accuracy() >= target ? " (target " : " (below target ",
            target, ")");
      }
      Finish(job, v1::SUCCEEDED, message, &ends);
    }
    if (request.done() && w->second.job_id == request.job_id()) {
      AddEvent(job, "finished", request.worker_id());
    }
    if (request.done() || !request.error().empty()) w->second.job_id.clear();
    response.set_job_state(job.status.state());
  }
  RunEnds(ends);
  return response;
}

std::string Coordinator::NewMemberId(const std::string& prefix) {
  const int64_t n = next_member_++;
  if (store_ != nullptr && next_member_ > reserved_member_) {
    reserved_member_ = next_member_ + 64;  // one record per 64 ids
    PersistCounters();
  }
  return absl::StrCat(prefix, n);
}

bool Coordinator::Adoptable(const std::string& id,
                            const std::string& prefix) const {
  if (!recovered_ || gone_.count(id) || id.rfind(prefix, 0) != 0) return false;
  int64_t n = 0;
  if (!absl::SimpleAtoi(id.substr(prefix.size()), &n)) return false;
  return n >= 1 && n < next_member_;
}

v1::PersistedJob Coordinator::ToPersisted(const Job& job) {
  v1::PersistedJob p;
  *p.mutable_status() = job.status;
  for (const std::string& a : job.shard_addresses) p.add_shard_addresses(a);
  p.set_dataset_size(job.dataset_size);
  for (int64_t step : job.bad_checkpoints) p.add_bad_checkpoints(step);
  return p;
}

absl::Status Coordinator::Persist(const Job& job) {
  if (store_ == nullptr) return absl::OkStatus();
  v1::StateRecord record;
  *record.mutable_job() = ToPersisted(job);
  absl::Status s = store_->Append(record);
  if (!s.ok()) {
    std::cerr << "fulcrum-coordinator: cannot persist " << job.status.job_id()
              << ": " << s << "\n";
    return s;
  }
  if (store_->records_since_snapshot() > 1000) {
    v1::CoordinatorState state;
    for (const auto& [id, j] : jobs_) *state.add_jobs() = ToPersisted(j);
    FillCounters(state.mutable_counters());
    absl::Status snap = store_->Snapshot(state);
    if (!snap.ok())
      std::cerr << "fulcrum-coordinator: snapshot failed: " << snap << "\n";
  }
  return absl::OkStatus();
}

void Coordinator::FillCounters(v1::IdCounters* out) const {
  out->set_next_job(next_job_);
  out->set_next_member(std::max(next_member_, reserved_member_));
}

void Coordinator::PersistCounters() {
  if (store_ == nullptr) return;
  v1::StateRecord record;
  FillCounters(record.mutable_counters());
  absl::Status s = store_->Append(record);
  if (!s.ok())
    std::cerr << "fulcrum-coordinator: cannot persist ids: " << s << "\n";
}

absl::Status Coordinator::Recover() {
  if (options_.state_dir.empty()) return absl::OkStatus();
  v1::CoordinatorState state;
  absl::StatusOr<std::unique_ptr<StateStore>> store =
      StateStore::Open(options_.state_dir, &state);
  if (!store.ok()) return store.status();
  absl::MutexLock lock(&mu_);
  store_ = std::move(*store);
  const absl::Time now = options_.now();
  std::vector<std::pair<double, std::string>> order;
  for (const v1::PersistedJob& p : state.jobs()) {
    const std::string& id = p.status().job_id();
    Job& job = jobs_[id];
    job.status = p.status();
    job.shard_addresses.assign(p.shard_addresses().begin(),
                               p.shard_addresses().end());
    job.dataset_size = p.dataset_size() == 0 ? -1 : p.dataset_size();
    job.bad_checkpoints.insert(p.bad_checkpoints().begin(),
                               p.bad_checkpoints().end());
    job.members = ToVector(job.status.workers());
    if (job.status.state() == v1::RUNNING) {
      job.recovering = true;
      job.recover_after = now + options_.lease;
    }
    order.emplace_back(job.status.submit_time_unix(), id);
    int64_t n = 0;
    if (absl::SimpleAtoi(id.substr(4), &n))
      next_job_ = std::max(next_job_, n + 1);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [t, id] : order) job_order_.push_back(id);
  next_job_ = std::max(next_job_, state.counters().next_job());
  next_member_ = std::max(next_member_, state.counters().next_member());
  reserved_member_ = next_member_;
  recovered_ = !state.jobs().empty() || state.counters().next_member() > 0;
  std::cerr << "fulcrum-coordinator: recovered " << jobs_.size()
            << " jobs from " << options_.state_dir << "\n";
  return absl::OkStatus();
}

std::vector<v1::Member> Coordinator::ListMembers() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  std::vector<v1::Member> out;
  for (const auto& [id, w] : workers_) {
    v1::Member m;
    m.set_id(id);
    m.set_role("worker");
    m.set_address(w.hostname);
    m.set_job_id(w.job_id);
    m.set_device(w.device);
    m.set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - w.last_heartbeat));
    out.push_back(std::move(m));
  }
  for (const auto& [id, s] : shard_members_) {
    v1::Member m;
    m.set_id(id);
    m.set_role("shard");
    m.set_address(s.address);
    m.set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - s.last_heartbeat));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace fulcrum
