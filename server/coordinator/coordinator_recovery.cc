// Coordinator's durable state: what it records in the journal, and how a
// restarted coordinator gets its jobs and ids back.
#include <algorithm>
#include <iostream>

#include "absl/strings/numbers.h"
#include "server/coordinator/coordinator_core.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

v1::PersistedJob ToPersisted(const Job& job) {
  v1::PersistedJob p;
  *p.mutable_status() = job.status;
  for (const std::string& a : job.shard_addresses) p.add_shard_addresses(a);
  p.set_dataset_size(job.chunks == nullptr ? -1 : job.chunks->dataset_size());
  for (int64_t step : job.bad_checkpoints) p.add_bad_checkpoints(step);
  return p;
}

}  // namespace

uint64_t Coordinator::Persist(const Job& job) {
  if (journal_ == nullptr) return 0;
  v1::StateRecord record;
  *record.mutable_job() = ToPersisted(job);
  const uint64_t ticket = journal_->Add(std::move(record));
  if (journal_->records_since_snapshot() <= 1000) return ticket;
  v1::CoordinatorState state;
  for (const auto& [id, j] : jobs_) *state.add_jobs() = ToPersisted(*j);
  state.mutable_counters()->set_next_job(next_job_);
  members_.FillCounters(state.mutable_counters());
  return journal_->AddSnapshot(std::move(state));
}

uint64_t Coordinator::PersistForgotten(const std::string& job_id) {
  if (journal_ == nullptr) return 0;
  v1::StateRecord record;
  record.set_forgotten_job(job_id);
  return journal_->Add(std::move(record));
}

uint64_t Coordinator::PersistCounters() {
  if (journal_ == nullptr) return 0;
  v1::StateRecord record;
  record.mutable_counters()->set_next_job(next_job_);
  members_.FillCounters(record.mutable_counters());
  return journal_->Add(std::move(record));
}

absl::Status Coordinator::Sync(uint64_t ticket) {
  if (journal_ == nullptr || ticket == 0) return absl::OkStatus();
  absl::Status s = journal_->Sync(ticket);
  if (!s.ok()) std::cerr << "fulcrum-coordinator: cannot persist: " << s << "\n";
  return s;
}

absl::Status Coordinator::Recover() {
  if (options_.state_dir.empty()) return absl::OkStatus();
  v1::CoordinatorState state;
  ASSIGN_OR_RETURN(std::unique_ptr<Journal> journal,
                   Journal::Open(options_.env, options_.state_dir, &state));
  absl::MutexLock lock(&mu_);
  journal_ = std::move(journal);
  const absl::Time now = options_.env->Now();
  std::vector<std::pair<double, std::string>> order;
  for (const v1::PersistedJob& p : state.jobs()) {
    const std::string& id = p.status().job_id();
    auto job = std::make_unique<Job>(id, p.status().spec(), now);
    job->status = p.status();
    job->shard_addresses.assign(p.shard_addresses().begin(),
                                p.shard_addresses().end());
    if (job->chunks != nullptr && p.dataset_size() > 0)
      job->chunks->set_dataset_size(p.dataset_size());
    job->bad_checkpoints.insert(p.bad_checkpoints().begin(),
                                p.bad_checkpoints().end());
    job->members = job->generation_workers();
    const v1::JobState s = p.status().state();
    if (s == v1::RUNNING) {
      job->SetPhase(JobPhase::kRecovering);
      job->recover_after = now + options_.lease;
    } else if (s != v1::PENDING) {
      job->SetPhase(JobPhase::kEnded, s);
    }
    order.emplace_back(job->status.submit_time_unix(), id);
    int64_t n = 0;
    if (absl::SimpleAtoi(id.substr(4), &n)) next_job_ = std::max(next_job_, n + 1);
    jobs_[id] = std::move(job);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [t, id] : order) job_order_.push_back(id);
  next_job_ = std::max(next_job_, state.counters().next_job());
  members_.Restore(state.counters(),
                   !state.jobs().empty() || state.counters().next_member() > 0);
  std::cerr << "fulcrum-coordinator: recovered " << jobs_.size()
            << " jobs from " << options_.state_dir << "\n";
  return absl::OkStatus();
}

}  // namespace fulcrum
