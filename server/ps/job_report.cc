#include "server/ps/job_report.h"

#include <algorithm>

namespace fulcrum {
namespace {

void AddStaleness(const StalenessStats& stats, v1::StalenessSummary* out) {
  out->set_reads(stats.reads);
  out->set_max(stats.max);
  out->set_mean(stats.reads > 0 ? static_cast<double>(stats.sum) / stats.reads
                                : 0.0);
  if (stats.reads == 0) return;
  const int64_t buckets =
      std::min<int64_t>(stats.max + 1, StalenessStats::kBuckets);
  for (int64_t i = 0; i < buckets; ++i) out->add_histogram(stats.counts[i]);
}

}  // namespace

v1::ShardJobStats JobReport(JobShard& job, const std::string& shard_id,
                            absl::Duration stall_threshold) {
  v1::ShardJobStats out;
  out.set_job_id(job.init().job_id);
  for (const JobShard::Stall& stall : job.Stalls(stall_threshold)) {
    v1::Stall* st = out.add_stalls();
    st->set_shard_id(shard_id);
    st->set_partition(stall.partition);
    st->set_step(stall.step);
    st->set_waited_seconds(stall.waited_seconds);
    for (const std::string& w : stall.waiting_for) st->add_waiting_for(w);
  }
  out.set_checkpoint_step(std::max<int64_t>(0, job.LastCheckpoint()));
  for (int64_t step : job.CheckpointSteps()) out.add_checkpoint_steps(step);
  out.set_checkpoints_nothing(job.CheckpointsNothing());
  out.set_generation(job.generation());
  Ledger ledger;
  if (job.Ledger(&ledger)) {
    out.set_has_ledger(true);
    for (const auto& [chunk, e] : ledger) {
      v1::LedgerEntry* entry = out.add_ledger();
      entry->set_chunk(chunk);
      entry->set_end(e.end);
      entry->set_samples(e.samples);
    }
  }
  AddStaleness(job.clocks().Stats(), out.mutable_staleness());
  out.set_initialized(job.initialized());
  if (const NonFiniteUpdate u = job.LastNonFinite(); u.count > 0) {
    v1::NonFiniteUpdates* n = out.mutable_nonfinite();
    n->set_count(u.count);
    n->set_step(u.step);
    n->set_partition(u.partition);
    n->set_worker_id(u.worker_id);
    n->set_largest(u.largest);
  }
  return out;
}

}  // namespace fulcrum
