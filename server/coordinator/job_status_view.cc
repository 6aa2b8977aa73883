#include "server/coordinator/job_status_view.h"

#include <algorithm>
#include <set>

namespace fulcrum {
namespace {

void AddWorkers(const Job& job, const MemberRegistry& members,
                v1::JobStatus* out) {
  for (const auto& [id, w] : members.workers()) {
    if (w.preparing && w.job_id == job.id()) out->add_preparing(id);
  }
  int live = 0;
  double rate = 0;
  const bool running = job.running();
  for (int rank = 0; rank < job.status.workers_size(); ++rank) {
    const WorkerMember* w = members.FindWorker(job.status.workers(rank));
    if (w == nullptr || w->job_id != job.id()) continue;
    if (running) ++live;
    rate += w->progress.samples_per_sec();
    // While running, rank 0's latest heartbeat speaks for the job.
    if (running && rank == 0 &&
        w->progress.step() >= out->progress().step()) {
      *out->mutable_progress() = w->progress;
    }
  }
  out->set_live_workers(live);
  if (running) out->mutable_progress()->set_samples_per_sec(rate);
  // An ended job keeps what it had at its end (Finish), restarts included.
  out->mutable_progress()->set_samples_total(
      std::max(SamplesTrained(job), job.status.progress().samples_total()));
}

}  // namespace

int64_t SamplesTrained(const Job& job) {
  int64_t samples = 0;
  for (const auto& [worker, n] : job.samples) samples += n;
  return samples;
}

void FillEpochs(const Job& job, v1::JobStatus* s) {
  s->clear_epochs();
  s->clear_earlier_epochs();
  if (job.chunks == nullptr) return;
  for (v1::EpochSamples& e : job.chunks->Epochs(job.ledger))
    *s->add_epochs() = std::move(e);
  CapEpochs(s);
}

void CapEpochs(v1::JobStatus* s, int max_listed) {
  const int n = s->epochs_size();
  if (n <= max_listed) return;
  v1::EpochSummary* sum = s->mutable_earlier_epochs();
  for (int i = 0; i < n - max_listed; ++i) {
    const v1::EpochSamples& e = s->epochs(i);
    sum->set_count(std::max(sum->count(), e.epoch() + 1));
    sum->set_trained(sum->trained() + e.trained());
    sum->set_total(sum->total() + e.total());
    if (e.trained() == e.total()) sum->set_exactly_once(sum->exactly_once() + 1);
  }
  s->mutable_epochs()->DeleteSubrange(0, n - max_listed);
}

namespace {

// A checkpoint is complete once every shard index has it on disk.
// Shards with nothing of the job to checkpoint do not count.
void AddCheckpoints(const Job& job, v1::JobStatus* out) {
  std::set<int64_t> common;
  bool first = true;
  for (int i = 0; i < job.status.shards_size(); ++i) {
    if (job.checkpoints_nothing.count(i)) continue;
    auto it = job.checkpoint_steps.find(i);
    std::set<int64_t> here;
    if (it != job.checkpoint_steps.end())
      here.insert(it->second.begin(), it->second.end());
    if (first) {
      common = std::move(here);
      first = false;
      continue;
    }
    for (auto c = common.begin(); c != common.end();)
      c = here.count(*c) ? std::next(c) : common.erase(c);
  }
  for (int64_t s : common) out->add_checkpoint_steps(s);
  out->set_checkpoint_step(common.empty() ? 0 : *common.rbegin());
}

// Staleness over every shard's reads.
void AddStaleness(const Job& job, v1::JobStatus* out) {
  v1::StalenessSummary* all = out->mutable_staleness();
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

}  // namespace

v1::JobStatus JobStatusView(const Job& job, const MemberRegistry& members) {
  v1::JobStatus out = job.status;
  out.clear_preparing();
  out.clear_checkpoint_steps();
  // Epochs from the shards' ledger while the coordinator has it; an ended
  // job after a restart shows those kept at its end (Finish).
  const bool from_ledger = job.chunks != nullptr &&
                           (job.phase != JobPhase::kEnded || !job.ledger.empty());
  out.clear_stalls();
  out.clear_staleness();
  out.mutable_shard_addresses()->Assign(job.shard_addresses.begin(),
                                        job.shard_addresses.end());
  AddWorkers(job, members, &out);
  AddCheckpoints(job, &out);
  // Samples per epoch, from the shards' ledger: what the parameters hold.
  if (from_ledger) FillEpochs(job, &out);
  if (job.running()) {
    for (const auto& [shard, stalls] : job.stalls) {
      for (const v1::Stall& s : stalls) *out.add_stalls() = s;
    }
  }
  AddStaleness(job, &out);
  return out;
}

}  // namespace fulcrum
