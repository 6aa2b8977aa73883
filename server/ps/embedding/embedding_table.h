// One embedding table's rows on one shard, safe for concurrent pulls and
// pushes: the rows are split by id hash into stripes (a power of two, up to
// 16, each a RowStore with capacity / stripes rows under its own lock), and
// a call takes each stripe's lock once for all of its ids. Capacity, lru
// order and lfu sampling are per stripe, so a table may start evicting a
// little before it holds `rows` in all.
//
// Time for ttl comes from the Env's clock, in whole seconds since the table
// was made.
//
// Thread safety: every method is safe to call concurrently; pulls of
// different stripes, and of one stripe with each other, run in parallel.
#ifndef FULCRUM_SERVER_PS_EMBEDDING_EMBEDDING_TABLE_H_
#define FULCRUM_SERVER_PS_EMBEDDING_EMBEDDING_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/env/env.h"
#include "fulcrum/v1/job.pb.h"
#include "server/ps/embedding/row_store.h"

namespace fulcrum {

class EmbeddingTable {
 public:
  // `spec` validated (with defaults); at most `rows` rows held here;
  // `seed` the job's; `undoable`: a sync job's (see Undo). `env` is not
  // owned and must outlive the table.
  EmbeddingTable(const v1::EmbeddingTableSpec& spec, uint64_t seed,
                 int64_t rows, Env* env, bool undoable = false);

  const std::string& name() const { return name_; }
  int dim() const { return dim_; }
  int64_t rows() const { return rows_; }

  // Rows of `ids` into out (ids.size() x dim), in order: values of resident
  // rows, initial values of the others. Changes nothing.
  void Pull(absl::Span<const uint64_t> ids, float* out) const;

  struct Pushed {
    int64_t applied = 0;  // rows stepped (created ones included)
    int64_t created = 0;
    int64_t pending = 0;  // not admitted yet
  };
  // Steps row ids[i] with gradients[i x dim, (i + 1) x dim) from counts[i]
  // samples (counts empty: 1 each), for training step `step`, with the
  // checkpoint cuts `cuts` open (row_cuts.h; each stripe takes the window
  // before the push). REQUIRES: ids distinct, gradients finite. Expires a
  // few rows past their ttl as it goes.
  Pushed Push(absl::Span<const uint64_t> ids, const float* gradients,
              absl::Span<const uint32_t> counts, int64_t step = -1,
              const CutWindow& cuts = {});

  // Takes back the pushes of steps >= `to` (RowStore::Undo) in every
  // stripe; false when a stripe could not (its rows stay as they are).
  // REQUIRES: no push runs concurrently (a membership change: older
  // generations' pushes are refused).
  bool Undo(int64_t to);

  // Evicts every row past its ttl now; returns how many.
  int64_t Expire();

  // Summed over the stripes.
  RowStore::Stats stats() const;

  int record_floats() const;
  // Every resident row with its frequency and record (values, then state),
  // stripe by stripe under each stripe's lock, most recent first within one.
  void ForEachRecord(
      const std::function<void(uint64_t, uint32_t, const float*)>& fn) const;
  // The same for a differential checkpoint, with each row's `changed`:
  // pushed since the last call with `full` set (RowStore::
  // ForEachRecordSince). A row's bit clears under its stripe's lock as it
  // is copied, so a push either lands in this copy or counts as changed.
  // `cut` >= 0: the rows as they were at that checkpoint cut (the open
  // cuts' images), which then closes in every stripe.
  void ForEachRecordSince(
      bool full,
      const std::function<void(uint64_t, uint32_t, const float*, bool)>& fn,
      int64_t cut = -1);
  // Replaces every row with `ids` (records ids.size() x record_floats(),
  // most recent first, as ForEachRecord gave them). REQUIRES: no push runs
  // concurrently with the same rows in mind (JobShard restores while
  // adopting a generation: older pushes are refused).
  void Restore(const std::vector<uint64_t>& ids,
               const std::vector<uint32_t>& freq,
               const std::vector<float>& records);
  // Forgets every row (the initial values again).
  void Clear();

  // The rows stripe by stripe (an export copies one stripe at a time):
  // fn(id, values, state) for each resident row of stripe `s` in
  // [0, stripes()), under that stripe's lock.
  int stripes() const { return static_cast<int>(stripes_.size()); }
  void ForEachRowOfStripe(
      int s, const std::function<void(uint64_t, const float*, const float*)>&
                 fn) const;
  // Calls fn(id, values, state) for every resident row (stripe by stripe,
  // each under its lock: not a cut across stripes while pushes run).
  void ForEachRow(
      const std::function<void(uint64_t, const float*, const float*)>& fn)
      const;

 private:
  struct Stripe {
    explicit Stripe(const RowStoreConfig& c) : store(c) {}
    mutable absl::Mutex mu;
    RowStore store ABSL_GUARDED_BY(mu);
  };
  int StripeOf(uint64_t id) const;
  // Positions of `ids` grouped by stripe: order[begin[s], begin[s + 1]).
  void GroupByStripe(absl::Span<const uint64_t> ids,
                     std::vector<uint32_t>* order,
                     std::vector<uint32_t>* begin) const;
  int64_t Now() const;

  const std::string name_;
  const int dim_;
  const int64_t rows_;
  Env* const env_;
  const absl::Time start_;
  std::vector<std::unique_ptr<Stripe>> stripes_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_EMBEDDING_TABLE_H_
