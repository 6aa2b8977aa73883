// A generation round: moves a job's shards to its next generation. Runs
// without the Coordinator's lock (it calls shards over the network) on the
// coordinator's executor; the Coordinator planned it under its lock and
// commits the result under it again (leveldb's DBImpl and VersionSet work
// the same way).
//
//   1. InitJob on any replacement shard (FAILED_PRECONDITION: already there,
//      a retried round - fine);
//   2. when restoring: phase 1 without restore on every shard, which reports
//      the checkpoint steps on disk; the newest step every shard has and
//      that has not failed before is chosen (ProbeRestoreStep);
//   3. phase 1 (adopt the generation, restoring that step if asked), each
//      shard reporting its lowest version;
//   4. phase 2: align every shard to the lowest version any reported,
//      returning the data ledger.
// A failed call fails the round; phase 1 accepts the same generation again,
// so the next tick retries it.
#ifndef FULCRUM_SERVER_COORDINATOR_ROUND_H_
#define FULCRUM_SERVER_COORDINATOR_ROUND_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/coordinator/chunk_table.h"
#include "server/coordinator/shard_control.h"

namespace fulcrum {

struct RoundPlan {
  std::string job_id;
  int64_t generation = 0;
  std::vector<std::string> workers;    // members of the new generation
  std::vector<std::string> addresses;  // by shard index
  std::vector<std::pair<std::string, v1::InitJobRequest>> inits;  // fresh
  bool restore = false;               // restore a checkpoint (a shard lost)
  std::set<int64_t> bad_checkpoints;  // failed to load before: never again
};

struct RoundResult {
  int64_t align_version = 0;  // the step every member resumes at
  int64_t restore_step = 0;   // restore: the checkpoint loaded (0: initial)
  LedgerMap ledger;           // what the parameters include
  std::set<int> awaiting_values;  // shard indexes without values (external)
};

// Runs `plan` (see above). A failure that is a checkpoint failing to load
// carries that step: BadCheckpoint(status).
absl::StatusOr<RoundResult> RunRound(const RoundPlan& plan,
                                     ShardControl* shards);
// The checkpoint step a failed round could not restore, or -1.
int64_t BadCheckpoint(const absl::Status& status);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_ROUND_H_
