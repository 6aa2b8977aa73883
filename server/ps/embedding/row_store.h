// The rows of one embedding table held in one stripe of one shard: values
// and optimizer state in blocks of fixed-size records, an id -> slot index
// (row_index.h), a recency list (LRU order, also the ttl order), admission
// counts for ids without a row (admission.h), and eviction by capacity
// (the least recently pushed row, or - lfu - the least frequently pushed of
// 8 sampled rows, frequencies halved as they age) and by ttl.
//
// Memory: slots never exceed `capacity`; a slot freed by eviction is
// reused, so memory grows with the most rows ever resident, up to
// capacity, and is not given back before the job ends. Per resident row:
// 4 x (dim + optimizer state floats) + 24 bytes of metadata (id, list
// links, last push, frequency) + 11 to 21 bytes of index.
//
// Recency, frequency and ttl count pushes (training); reads (evaluation)
// change nothing.
//
// Exact checkpoint cuts (row_cuts.h): with a CutWindow set, a push of
// step s first keeps an image of its row for every open cut <= s, and so
// do an eviction (for the cuts <= the evicting push's step) and a ttl
// expiry (for every open cut); ForEachRecordSince(..., cut) then reads
// every row as it was at the cut.
//
// Undo (sync jobs, config.undoable): a membership change may undo the
// step the dense partitions had not all completed (JobShard::Align), and
// its samples are trained again, so the rows must forget that step's
// pushes too. The store keeps one more cut, at the newest step any push
// carried (a worker pushes step s's rows only after reading version s of
// every partition, so no align goes below it); Undo(to) puts every row the
// pushes of steps >= `to` changed, created, evicted or expired back as it
// was, from that cut's images. What it does not restore: admission counts
// of ids still pending (a few occurrences early) and the recency order of
// the restored rows (they become the most recent).
//
// Thread safety: none; EmbeddingTable locks each stripe. Read and the
// const methods may run concurrently with each other.
#ifndef FULCRUM_SERVER_PS_EMBEDDING_ROW_STORE_H_
#define FULCRUM_SERVER_PS_EMBEDDING_ROW_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "server/ps/embedding/admission.h"
#include "server/ps/embedding/row_cuts.h"
#include "server/ps/embedding/row_index.h"
#include "server/ps/embedding/row_math.h"

namespace fulcrum {

struct RowStoreConfig {
  enum class Eviction { kLru, kLfu };
  int dim = 1;
  RowInit init;
  RowOptimizer optimizer;
  int64_t capacity = 1;  // rows, >= 1
  Eviction eviction = Eviction::kLru;
  int min_count = 1;        // pushes before a row is created
  int64_t ttl_seconds = 0;  // 0: rows never expire
  uint64_t seed = 1;        // lfu's sampling
  // Sync jobs: keep what Undo needs to take back the newest step's pushes.
  bool undoable = false;
};

class RowStore {
 public:
  explicit RowStore(const RowStoreConfig& config);
  RowStore(const RowStore&) = delete;  // the index points back to it
  RowStore& operator=(const RowStore&) = delete;

  // Row `id` into out[0, dim): its values, or the initial ones when it has
  // no row.
  void Read(uint64_t id, float* out) const;
  bool Resident(uint64_t id) const { return index_.Find(id) != kNone; }
  // The row's optimizer state (StateFloats(dim) floats), or null.
  const float* State(uint64_t id) const;

  enum class Pushed {
    kApplied,  // the row's optimizer step ran
    kCreated,  // the row was created (from its initial values), then stepped
    kPending,  // not admitted yet: counted, nothing stored
  };
  // One push of row `id`: `count` samples touched it, `g` (dim floats) is
  // their summed gradient, at `now` (seconds, never decreasing), for
  // training step `step` (which cut it belongs after; < 0: none).
  Pushed Push(uint64_t id, const float* g, uint32_t count, int64_t now,
              int64_t step = -1);

  // The open checkpoint cuts from now on (row_cuts.h); copied cuts close.
  void SetCuts(const CutWindow& window) { cuts_.Set(window); }

  // Takes back every push of a step >= `to` (see Undo above) at `now`;
  // nothing to do when no push carried such a step. False when it cannot
  // (pushes of a step >= `to` went past the undo cut - a client pushing
  // rows of steps the dense partitions had not reached): the rows stay as
  // they are. Either way the undo cut starts again below `to`.
  bool Undo(int64_t to, int64_t now);

  // Evicts up to `max_rows` rows not pushed for ttl_seconds at `now`,
  // oldest first; returns how many.
  int64_t Expire(int64_t now, int64_t max_rows);

  struct Stats {
    int64_t resident = 0;
    int64_t created = 0;           // rows admitted, ever
    int64_t evicted_capacity = 0;  // rows evicted to make room
    int64_t evicted_ttl = 0;       // rows expired
    int64_t pending_pushes = 0;    // pushes of ids not admitted yet
    int64_t bytes = 0;             // everything this store allocated
    int64_t cut_rows = 0;          // images held for open cuts
    int64_t undo_rows = 0;         // images held to undo the newest step
    int64_t undone = 0;            // rows Undo put back, ever
  };
  Stats stats() const;

  // Restoring a checkpoint: forgets every row (the totals in stats() stay:
  // they only grow), then Insert puts saved rows back, oldest first (the
  // last inserted is the most recent). Insert replaces a resident row.
  void Clear();
  void Insert(uint64_t id, const float* record, uint32_t freq, int64_t now);
  // Calls fn(id, frequency, record) for each resident row, most recent
  // first (record: dim values, then the optimizer state).
  void ForEachRecord(
      const std::function<void(uint64_t, uint32_t, const float*)>& fn) const;
  int record_floats() const { return stride_; }
  // Differential checkpoints: fn(id, frequency, record, changed) for each
  // resident row, most recent first; `changed`: pushed (or created) since
  // the last call with `forget` set - which then leaves no row changed.
  // Rows Insert put back count as unchanged.
  // With `cut` >= 0 the rows are those of that cut: a row's image where it
  // has one (changed; rows created after the cut left out, rows evicted or
  // expired since it last), the live row otherwise; `forget` then leaves
  // the rows changed after the cut changed; cuts <= `cut` close.
  void ForEachRecordSince(
      bool forget,
      const std::function<void(uint64_t, uint32_t, const float*, bool)>& fn,
      int64_t cut = -1);

  // Calls fn(id, values, state) for each resident row, most recent first.
  void ForEachRow(
      const std::function<void(uint64_t, const float*, const float*)>& fn)
      const;

  int dim() const { return config_.dim; }

 private:
  static constexpr uint32_t kNone = ~uint32_t{0};
  struct Meta {
    uint64_t id;
    uint32_t prev;   // towards the most recent
    uint32_t next;   // towards the least recent
    int32_t touch;   // last push, seconds
    uint32_t freq;   // pushes (samples), halved as they age
  };
  struct KeyOf {
    const RowStore* store;
    uint64_t operator()(uint32_t slot) const { return store->meta(slot).id; }
  };

  Meta& meta(uint32_t slot) { return meta_[slot / rows_per_block_][slot % rows_per_block_]; }
  const Meta& meta(uint32_t slot) const {
    return meta_[slot / rows_per_block_][slot % rows_per_block_];
  }
  float* row(uint32_t slot) {
    return rows_[slot / rows_per_block_].get() +
           static_cast<size_t>(slot % rows_per_block_) * stride_;
  }
  const float* row(uint32_t slot) const {
    return rows_[slot / rows_per_block_].get() +
           static_cast<size_t>(slot % rows_per_block_) * stride_;
  }

  // Images `id` (`record` null: no row) for the open cuts <= `step`, the
  // undo cut's included.
  void SaveImages(uint64_t id, int64_t step, const float* record,
                  uint32_t freq);
  // A push of `step` to `id` also steps the images of later cuts.
  void StepLaterImages(uint64_t id, int64_t step, const float* g,
                       uint32_t count);
  // A slot for a new row: a free one, a new one, or the victim's (imaged
  // for the open cuts <= `step` first).
  uint32_t TakeSlot(int64_t step = -1);
  uint32_t Victim();
  // Insert's work; returns the row's slot.
  uint32_t Place(uint64_t id, const float* record, uint32_t freq, int64_t now);
  void Unlink(uint32_t slot);
  void LinkFront(uint32_t slot);
  void Remove(uint32_t slot);  // unlink, unindex, free
  void AddFrequency(uint32_t slot, uint32_t count);
  bool Changed(uint32_t slot) const {
    return (changed_[slot / 64] >> (slot % 64)) & 1;
  }
  void SetChanged(uint32_t slot, bool on) {
    const uint64_t bit = uint64_t{1} << (slot % 64);
    changed_[slot / 64] = on ? (changed_[slot / 64] | bit)
                             : (changed_[slot / 64] & ~bit);
  }

  const RowStoreConfig config_;
  const int stride_;  // floats per record: dim + optimizer state
  const uint32_t rows_per_block_;
  std::vector<std::unique_ptr<float[]>> rows_;
  std::vector<std::unique_ptr<Meta[]>> meta_;
  uint32_t slots_ = 0;            // slots handed out (high-water mark)
  std::vector<uint32_t> free_;    // slots freed by ttl, reused first
  std::vector<uint64_t> changed_; // bit per slot: pushed since the last
                                  // full checkpoint (ForEachRecordSince)
  RowIndex<KeyOf> index_;
  std::optional<AdmissionSketch> sketch_;  // min_count > 1
  RowCuts cuts_;
  RowCuts undo_;                  // the cut at newest_step_ (undoable)
  int64_t newest_step_ = -1;      // the newest step a push carried
  uint32_t head_ = kNone;         // most recently pushed
  uint32_t tail_ = kNone;         // least recently pushed
  uint64_t rng_;
  uint64_t freq_added_ = 0;       // since the last halving
  Stats stats_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_ROW_STORE_H_
