// One job as the coordinator keeps it: its public status, where in its
// life it is (one phase), the membership it wants for its next generation,
// its shards, chunk table and data ledger, and what the shards last
// reported. Plain data; the Coordinator's lock guards every Job.
#ifndef FULCRUM_SERVER_COORDINATOR_JOB_H_
#define FULCRUM_SERVER_COORDINATOR_JOB_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "server/coordinator/chunk_table.h"

namespace fulcrum {

enum class JobPhase {
  kWaiting,        // PENDING: too few idle workers or shards
  kStarting,       // PENDING: InitJob calls in flight
  kRecovering,     // RUNNING: the coordinator restarted; members return
  kRunning,        // RUNNING: the shards serve a generation
  kReconfiguring,  // RUNNING: a round moves the shards to the next one
  kFinishing,      // RUNNING: a worker reported done; no more rounds
  kEnded,          // SUCCEEDED, FAILED or CANCELLED
};
const char* PhaseName(JobPhase phase);

struct Job {
  Job(const std::string& id, v1::JobSpec spec, absl::Time submitted);

  // The phase, and the public state that goes with it (`ended`: the
  // terminal state, for kEnded).
  void SetPhase(JobPhase phase, v1::JobState ended = v1::SUCCEEDED);
  bool running() const {  // shards serve it (RUNNING)
    return phase >= JobPhase::kRecovering && phase < JobPhase::kEnded;
  }
  bool pending() const { return phase < JobPhase::kRecovering; }
  // Trained by external workers (fulcrum.torch) whose model it is.
  bool external() const { return spec().model().type() == "external"; }
  const std::string& id() const { return status.job_id(); }
  const v1::JobSpec& spec() const { return status.spec(); }
  // The generation the shards serve.
  std::vector<std::string> generation_workers() const {
    return {status.workers().begin(), status.workers().end()};
  }
  bool in_generation(const std::string& worker) const;

  v1::JobStatus status;
  JobPhase phase = JobPhase::kWaiting;
  // Membership wanted for the next generation.
  std::vector<std::string> members;
  // What the next round must do besides adopting `members`.
  struct NextRound {
    std::set<int> missing_shards;  // indexes whose shard was lost
    std::set<int> fresh_shards;    // replacements that need InitJob
    bool restore = false;          // load a checkpoint (a shard was lost)
    bool force = false;            // a generation even with the same members
  } next;
  std::set<int64_t> bad_checkpoints;  // failed to restore
  // Checkpoint steps on disk, by shard index (from heartbeats).
  std::map<int, std::vector<int64_t>> checkpoint_steps;
  // Shard indexes with nothing of the job to checkpoint (no partition, no
  // table): a checkpoint is complete without them.
  std::set<int> checkpoints_nothing;
  absl::Time recover_after = absl::InfinitePast();  // kRecovering
  // A member whose lease lapsed came back: until then the round waits for
  // the generation's other lapsed members (Coordinator::Rejoin).
  absl::Time rejoin_until = absl::InfinitePast();
  // Members dropped because their lease lapsed, who may come back.
  std::set<std::string> lapsed;
  // When a member last lapsed: for a lease after it, the round waits for
  // members gone silent too (Coordinator::ReadyForRound).
  absl::Time lapsed_at = absl::InfinitePast();
  absl::Time ready_since = absl::InfinitePast();    // kWaiting: min idle
  std::vector<std::string> shard_addresses;         // by shard index
  int64_t shard_bytes = 0;  // the most one shard holds for it (ShardBytes)
  // Shard indexes that wait for the model's values from a member (an
  // external model; rank 0 is told to upload them).
  std::set<int> awaiting_values;
  std::unique_ptr<ChunkTable> chunks;  // dataset.sharding "chunks"
  LedgerMap ledger;                    // latest from the shards
  std::map<std::string, v1::StalenessSummary> staleness;  // by shard id
  // Refused non-finite updates each shard reported (count), so that each
  // is taken once.
  std::map<std::string, int64_t> nonfinite_seen;  // by shard id
  std::map<std::string, int64_t> samples;  // trained so far, by worker id
  // Stalled sync steps in each shard's latest report, by shard id.
  std::map<std::string, std::vector<v1::Stall>> stalls;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_JOB_H_
