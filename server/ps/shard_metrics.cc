#include "server/ps/shard_metrics.h"

namespace fulcrum {

ShardMetrics::ShardMetrics(metrics::Registry& r)
    : push_bytes(r.AddCounter("fulcrum_server_push_bytes_total",
                              "Gradient payload bytes received from workers.",
                              {"job_id"})),
      pull_bytes(r.AddCounter("fulcrum_server_pull_bytes_total",
                              "Parameter payload bytes sent to workers.",
                              {"job_id"})),
      aggregate_seconds(
          r.AddHistogram("fulcrum_server_aggregate_seconds",
                         "Time to validate and accumulate one push, including "
                         "the optimizer update "
                         "when the push completes a step (sync) or a worker's "
                         "gradient (ssp/async).",
                         {"job_id"}, metrics::ExponentialBuckets(1e-6, 3, 14))),
      barrier_wait_seconds(
          r.AddHistogram("fulcrum_server_barrier_wait_seconds",
                         "Time a worker's read waited for the other workers "
                         "(sync barrier or ssp bound).",
                         {"job_id"}, metrics::LatencyBuckets())),
      staleness(r.AddHistogram(
          "fulcrum_server_staleness",
          "Staleness of each read in clocks: the reader's clock minus the "
          "slowest "
          "training worker's (0 in sync, at most s in ssp).",
          {"job_id"}, {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256})),
      rejected_pushes(r.AddCounter(
          "fulcrum_server_rejected_pushes_total",
          "Pushes, streams and row requests rejected, by status code.",
          {"reason"})),
      nonfinite_updates(r.AddCounter(
          "fulcrum_server_nonfinite_updates_total",
          "Updates refused because they would have made a parameter or "
          "optimizer value NaN or infinite (the parameters stay as they "
          "were).",
          {"job_id"})),
      streams(r.AddGauge("fulcrum_server_streams",
                         "Worker streams (and uploads) open now; at "
                         "--max_streams one more is refused "
                         "(rejected_pushes_total{reason=\"resource_exhausted\"}).")),
      shm_streams(r.AddCounter(
          "fulcrum_server_shm_streams_total",
          "Worker streams that offered a shared-memory segment, by whether "
          "this shard mapped it (mapped) or left the stream on TCP "
          "(refused; the log says why).",
          {"result"})),
      group_members(r.AddCounter(
          "fulcrum_server_group_members_total",
          "Workers whose gradients arrive summed in another member's stream "
          "(wire.pre_reduce: one stream per host group), counted at each "
          "stream's hello.")),
      deferred_unscoped(r.AddCounter(
          "fulcrum_server_deferred_unscoped_total",
          "Wait continuations (a stream's answer that had to wait) decided "
          "by a call without a DeferredCalls scope, so run on a background "
          "thread: correct but slower, and a bug to report - it stays 0.")),
      jobs(r.AddGauge("fulcrum_server_jobs",
                      "Jobs whose partitions this shard holds.")),
      checkpoint_seconds(r.AddHistogram(
          "fulcrum_checkpoint_seconds",
          "Time to write (and fsync) this shard's checkpoint file of a step.",
          {"job_id"}, metrics::LatencyBuckets())),
      checkpoint_failures(r.AddCounter(
          "fulcrum_checkpoint_failures_total",
          "Checkpoint writes that failed on this shard.", {"job_id"})),
      checkpoint_last_step(r.AddGauge(
          "fulcrum_checkpoint_last_step",
          "Newest step this shard wrote a checkpoint of.", {"job_id"})),
      embedding_rows(r.AddGauge(
          "fulcrum_server_embedding_rows",
          "Rows of an embedding table resident on this shard.",
          {"job_id", "table"})),
      embedding_bytes(r.AddGauge(
          "fulcrum_server_embedding_bytes",
          "Bytes an embedding table holds on this shard: values, optimizer "
          "state, row metadata, index and admission counters.",
          {"job_id", "table"})),
      embedding_cut_rows(r.AddGauge(
          "fulcrum_server_embedding_cut_rows",
          "Row images an embedding table keeps for checkpoint cuts not "
          "copied yet (rows changed after the cut).",
          {"job_id", "table"})),
      embedding_undo_rows(r.AddGauge(
          "fulcrum_server_embedding_undo_rows",
          "Row images an embedding table of a sync job keeps to undo the "
          "newest step's pushes (rows that step changed).",
          {"job_id", "table"})),
      embedding_undone(r.AddCounter(
          "fulcrum_server_embedding_undone_rows_total",
          "Rows put back as they were before a step a membership change "
          "undid (sync jobs).",
          {"job_id", "table"})),
      embedding_admitted(r.AddCounter(
          "fulcrum_server_embedding_admitted_rows_total",
          "Rows created (admitted: pushed min_count times).",
          {"job_id", "table"})),
      embedding_evicted(r.AddCounter(
          "fulcrum_server_embedding_evicted_rows_total",
          "Rows evicted, by reason: capacity (to make room) or ttl.",
          {"job_id", "table", "reason"})),
      embedding_pending(r.AddCounter(
          "fulcrum_server_embedding_pending_pushes_total",
          "Row pushes of ids not admitted yet (counted, not stored).",
          {"job_id", "table"})),
      embedding_pulled(r.AddCounter(
          "fulcrum_server_embedding_pulled_rows_total",
          "Rows read by workers (SparsePull).", {"job_id", "table"})),
      embedding_pushed(r.AddCounter(
          "fulcrum_server_embedding_pushed_rows_total",
          "Row gradients received from workers (SparsePush; repeats not "
          "counted).",
          {"job_id", "table"})) {
  // Every reason is exported from the start (at 0), so rates and alerts see
  // the series before the first rejection.
  for (const char* reason :
       {"invalid_argument", "not_found", "failed_precondition",
        "permission_denied", "aborted", "deadline_exceeded", "unavailable",
        "internal", "data_loss", "out_of_range", "resource_exhausted"}) {
    rejected_pushes.WithLabels({reason});
  }
  jobs.WithLabels().Set(0);
  streams.WithLabels().Set(0);
  shm_streams.WithLabels({"mapped"});
  shm_streams.WithLabels({"refused"});
  group_members.WithLabels();
  deferred_unscoped.WithLabels();
}

ShardMetrics::Job ShardMetrics::ForJob(const std::string& job_id) {
  nonfinite_updates.WithLabels({job_id});  // exported from the start, at 0
  return {&push_bytes.WithLabels({job_id}), &pull_bytes.WithLabels({job_id}),
          &aggregate_seconds.WithLabels({job_id}),
          &barrier_wait_seconds.WithLabels({job_id}),
          &staleness.WithLabels({job_id})};
}

void ShardMetrics::CheckpointsEnabled(const std::string& job_id) {
  checkpoint_failures.WithLabels({job_id});
  checkpoint_last_step.WithLabels({job_id});
  checkpoint_seconds.WithLabels({job_id});
}

void ShardMetrics::CheckpointWritten(const std::string& job_id, int64_t step,
                                     double seconds, bool ok) {
  checkpoint_seconds.WithLabels({job_id}).Observe(seconds);
  if (!ok) {
    checkpoint_failures.WithLabels({job_id}).Increment();
    return;
  }
  metrics::Gauge& last = checkpoint_last_step.WithLabels({job_id});
  if (step > last.Value()) last.Set(static_cast<double>(step));
}

ShardMetrics::Table ShardMetrics::ForTable(const std::string& job_id,
                                           const std::string& table) {
  return {&embedding_pulled.WithLabels({job_id, table}),
          &embedding_pushed.WithLabels({job_id, table})};
}

namespace {
// A counter set from a cumulative total kept elsewhere.
void CatchUp(metrics::Counter& c, int64_t total) {
  const double d = static_cast<double>(total) - c.Value();
  if (d > 0) c.Increment(d);
}
}  // namespace

void ShardMetrics::TableState(const std::string& job_id,
                              const std::string& table,
                              const RowStore::Stats& s) {
  absl::MutexLock lock(&table_state_mu_);
  ForTable(job_id, table);  // exported from the start, at 0
  embedding_rows.WithLabels({job_id, table}).Set(s.resident);
  embedding_bytes.WithLabels({job_id, table}).Set(s.bytes);
  embedding_cut_rows.WithLabels({job_id, table}).Set(s.cut_rows);
  embedding_undo_rows.WithLabels({job_id, table}).Set(s.undo_rows);
  CatchUp(embedding_undone.WithLabels({job_id, table}), s.undone);
  CatchUp(embedding_admitted.WithLabels({job_id, table}), s.created);
  CatchUp(embedding_evicted.WithLabels({job_id, table, "capacity"}),
          s.evicted_capacity);
  CatchUp(embedding_evicted.WithLabels({job_id, table, "ttl"}), s.evicted_ttl);
  CatchUp(embedding_pending.WithLabels({job_id, table}), s.pending_pushes);
}

void ShardMetrics::Rejected(const std::string& reason) {
  rejected_pushes.WithLabels({reason}).Increment();
}

}  // namespace fulcrum
