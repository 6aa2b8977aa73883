// A job's embedding tables on one shard: the rows this shard holds of each
// table (placement.h), sparse pulls and pushes checked like dense ones - a
// bad request is INVALID_ARGUMENT naming the field and changes nothing -,
// and the push log that makes a repeated push harmless. Membership and
// generations are the JobShard's (it calls these after MemberIndex).
//
// Pushes apply on arrival (each worker's rows as they come, as Persia and
// Monolith do for embeddings). A table with a `staleness` bound keeps a
// ClockTable of its own: a member's clock on this shard is the number of
// steps whose chunks have all arrived here, and a pull for step c waits
// until every member still training has clock >= c - staleness.
//
// Thread safety: every method is safe to call concurrently.
#ifndef FULCRUM_SERVER_PS_EMBEDDING_EMBEDDING_TABLES_H_
#define FULCRUM_SERVER_PS_EMBEDDING_EMBEDDING_TABLES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/env/env.h"
#include "fulcrum/v1/job.pb.h"
#include "server/ps/clocks.h"
#include "server/ps/embedding/checkpoint_cuts.h"
#include "server/ps/embedding/embedding_table.h"
#include "server/ps/embedding/table_format.h"

namespace fulcrum {

// One sparse push as the transport received it (nothing owned).
struct RowsPush {
  std::string_view table;
  int64_t generation = 0;
  int64_t step = 0;
  int32_t chunk = 0;
  int32_t chunks = 1;
  absl::Span<const uint64_t> ids;
  const char* gradients = nullptr;  // fp32 little-endian, ids x dim
  size_t gradient_bytes = 0;
  absl::Span<const uint32_t> counts;  // empty: 1 each
};

// Who reads and for which step (a table with a staleness bound waits).
struct RowsRead {
  int member = -1;          // the reader's index in the generation
  int64_t step = -1;        // < 0: no wait (evaluation)
  int64_t generation = -1;  // waits end (ABORTED) when it is replaced
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled = [] { return false; };
};

struct RowsPushed {
  int64_t applied = 0;
  int64_t pending = 0;
  bool repeat = false;
  bool completes = false;  // every chunk of the member's step has arrived
  int table = -1;          // the table's index
  bool row_clock_moved = false;  // the member's steps pushed to every table
};

class EmbeddingTables {
 public:
  static constexpr int kMaxChunks = 64;

  // The tables of `spec` (validated) as shard `shard` of `shards` holds
  // them, for `members` members of `generation`. `env` is not owned and must
  // outlive this.
  EmbeddingTables(const v1::JobSpec& spec, int shard, int shards, Env* env,
                  int members = 1, int64_t generation = 1);

  bool empty() const { return tables_.empty(); }
  // Null when the job has no such table.
  EmbeddingTable* Find(std::string_view name) const;
  const std::vector<std::unique_ptr<EmbeddingTable>>& tables() const {
    return tables_;
  }

  // Rows of `ids` of `table` into *out (resized to ids x dim). NOT_FOUND
  // naming the table; INVALID_ARGUMENT naming `ids` when one is held by
  // another shard or the answer would pass chunk_bytes.
  // With a staleness bound and read.step >= 0 it first waits (see above):
  // DEADLINE_EXCEEDED, CANCELLED or ABORTED end the wait.
  absl::Status Pull(std::string_view table, absl::Span<const uint64_t> ids,
                    std::vector<float>* out, const RowsRead& read = {}) const;

  // Applies `push` from `worker` once: a (worker, generation, step, chunk)
  // seen before - or an older step of that worker and generation - is a
  // repeat (acknowledged, nothing applied).
  // `member` is the worker's index in push.generation (its clock), or -1.
  absl::StatusOr<RowsPushed> Push(const std::string& worker,
                                  const RowsPush& push, int member = -1);

  // Checkpoints: every table's rows as a blob (table_format.h), keyed
  // -1 - table index, so that they share a checkpoint file with the dense
  // partitions (ids >= 0). Every checkpoint.full_every-th save is full
  // (so is the first, the first after a restore and the one after a full
  // save that was not written); the others are differentials against the
  // last full one, whose step is `base` (a full save's own step).
  // The rows are those of the cut at `step` (checkpoint_cuts.h): Save
  // first waits up to rows_wait for every member's rows of the steps
  // before it (then copies what there is, with `late` saying what is
  // missing); in sync jobs no push of a later step is in them. `skip`:
  // not written (the cut was dropped), and why.
  struct Saved {
    std::vector<std::pair<int32_t, std::string>> blobs;
    int64_t base = -1;
    absl::Status late;
    absl::Status skip;
  };
  Saved Save(int64_t step);
  void set_rows_wait(absl::Duration d) { rows_wait_ = d; }
  // The smallest member's row clock: steps whose rows every member pushed
  // to every table in use (INT64_MAX: none yet).
  int64_t RowClock() const { return cuts_.MinClock(); }
  // The checkpoint file of `step` was written (ok) or not.
  void Written(int64_t step, bool ok);
  // The tables' blobs among a checkpoint's (keys < 0): one for every table,
  // each decoded and checked. DATA_LOSS or INVALID_ARGUMENT; changes
  // nothing. Differentials come back as such (SavedRows::base_step).
  absl::StatusOr<std::vector<SavedRows>> Decode(
      const std::vector<std::pair<int32_t, std::string>>& blobs) const;
  // Differentials made whole: `read(step)` gives the blobs of the
  // checkpoint a differential names. DATA_LOSS (naming that step) when it
  // cannot be read or does not hold the rows.
  using BlobReader =
      std::function<absl::StatusOr<std::vector<std::pair<int32_t, std::string>>>(
          int64_t step)>;
  absl::StatusOr<std::vector<SavedRows>> Resolve(std::vector<SavedRows> saved,
                                                 const BlobReader& read) const;
  // Replaces every table's rows with Decode's result, those of `step`.
  void Restore(const std::vector<SavedRows>& saved, int64_t step);
  // Every table back to its initial values (a restore of step 0).
  void Clear();

  // Sync jobs: a membership change aligns the job to step `to`, undoing
  // the step not every dense partition completed; the rows forget the
  // pushes of steps >= `to` (RowStore::Undo). An error (INTERNAL, naming
  // the tables) when a table could not: its rows stay as they are. Does
  // nothing in ssp and async jobs (their dense steps are not undone
  // either). REQUIRES: older generations' pushes are refused (Adopt).
  absl::Status Undo(int64_t to);

  // A new generation of `members`, every clock at `clock` (JobShard::Align);
  // waits of older generations end with ABORTED.
  void ResetClocks(int members, int64_t clock, int64_t generation);
  // Wakes every wait with ABORTED (the job ended).
  void End();

 private:
  absl::Status CheckIds(const EmbeddingTable& t, absl::Span<const uint64_t> ids,
                        bool distinct) const;
  absl::Status CheckPush(const EmbeddingTable& t, const RowsPush& push) const;
  // Marks the chunk received; false when it had been before. *completes:
  // every chunk of the step has now arrived.
  bool FirstTime(const std::string& worker, int table, const RowsPush& push,
                 bool* completes);

  const int shard_;
  const int shards_;
  const int64_t chunk_bytes_;
  const int full_every_;
  const bool sync_;  // sync or ssp(0): dense steps can be undone
  CheckpointCuts cuts_;
  absl::Duration rows_wait_ = absl::Seconds(30);
  absl::Mutex save_mu_;  // the checkpoint writer's thread; restores
  bool need_full_ ABSL_GUARDED_BY(save_mu_) = true;
  int64_t full_base_ ABSL_GUARDED_BY(save_mu_) = -1;  // last full, written
  int64_t pending_full_ ABSL_GUARDED_BY(save_mu_) = -1;
  int saves_since_full_ ABSL_GUARDED_BY(save_mu_) = 0;
  std::vector<std::unique_ptr<EmbeddingTable>> tables_;
  std::vector<int> staleness_;  // by table; -1: no bound
  std::vector<std::unique_ptr<ClockTable>> clocks_;  // by table; null: no bound

  struct Received {
    int64_t generation = -1;
    int64_t step = -1;
    uint64_t chunks = 0;  // bit c: chunk c of `step` arrived
  };
  absl::Mutex log_mu_;
  // By (worker, table index). Entries of workers that stopped pushing stay
  // until the log passes kMaxLog entries, then older generations go.
  std::map<std::pair<std::string, int>, Received> log_ ABSL_GUARDED_BY(log_mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_EMBEDDING_TABLES_H_
