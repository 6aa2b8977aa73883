// Exact checkpoint cuts of one RowStore: for each open cut c, the records
// of the rows as pushes of steps < c left them, kept for every row that
// something after the cut changed - a push of step >= c, an eviction or a
// ttl expiry - before the checkpoint writer copied cut c. Rows nothing
// changed since the cut are their live selves; a cut's copy reads an image
// where there is one, the live row otherwise (RowStore::ForEachRecordSince).
//
// A push of step s < c that arrives after an image of cut c was taken (a
// slower member's, in flight) steps the image as well as the live row, so
// the image stays "every push of step < c, in arrival order".
//
// The open cuts are the multiples of `every` in (lo, hi] (CutWindow); the
// table above decides the window, at most a few cuts wide, and moves lo up
// as the writer copies cuts, which drops their images.
//
// Memory: per image one record (4 x (dim + optimizer state) bytes) and
// about 24 bytes of index, held from the push that took it until the cut
// is copied: bounded by the rows changed between a cut and its copy, times
// the open cuts. RowStore::Stats::cut_rows counts them.
//
// Thread safety: none; the RowStore's owner locks.
#ifndef FULCRUM_SERVER_PS_EMBEDDING_ROW_CUTS_H_
#define FULCRUM_SERVER_PS_EMBEDDING_ROW_CUTS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"

namespace fulcrum {

// The open cuts: multiples of `every` in (lo, hi]. every == 0: none.
struct CutWindow {
  int64_t every = 0;
  int64_t lo = 0;
  int64_t hi = 0;
};

class RowCuts {
 public:
  // A push that changes a row after every open cut (ttl expiry).
  static constexpr int64_t kAfterAll = INT64_MAX;

  explicit RowCuts(int stride) : stride_(stride) {}

  // Opens the window's cuts not open yet and drops every cut <= window.lo.
  // A window whose lo is below one seen before reopens nothing at or below
  // that (a copied cut stays copied until Reset).
  void Set(const CutWindow& window);
  // Forgets every cut and image (a restore).
  void Reset();
  bool empty() const { return cuts_.empty(); }

  struct Image {
    bool resident = false;  // false: no row at the cut (created after it)
    uint32_t freq = 0;
    float* record = nullptr;  // stride floats, when resident
  };
  // Takes an image of `id` for every open cut <= step that has none: its
  // record (null: no row) and frequency as they are now.
  void Save(uint64_t id, int64_t step, const float* record, uint32_t freq);
  // Calls fn(image) for every open cut > step that holds an image of `id`
  // (a push of an earlier step reaching rows changed after those cuts).
  // `fn` may make a non-resident image resident: it then fills the record
  // Image::record points to.
  void ForLater(uint64_t id, int64_t step,
                absl::FunctionRef<void(Image&)> fn);
  // Whether `cut` is open.
  bool Has(int64_t cut) const;
  // The image of `id` at `cut`, or null.
  const Image* Find(int64_t cut, uint64_t id) const;
  // fn(id, image) for every image of `cut`.
  void ForEach(int64_t cut,
               absl::FunctionRef<void(uint64_t, const Image&)> fn) const;
  // Drops every cut <= `cut` (copied); no cut <= it opens again.
  void DropThrough(int64_t cut);

  int64_t images() const;
  int64_t bytes() const;

 private:
  struct Cut {
    int64_t step = 0;
    absl::flat_hash_map<uint64_t, Image> images;
    // Records in blocks that never move (images point into them).
    std::vector<std::unique_ptr<float[]>> blocks;
    size_t in_use = 0;  // blocks handed out from (a reused cut has more)
    size_t used = 0;    // records handed out in the last of those
    float* NewRecord(int stride);
  };
  Cut* Open(int64_t step);

  const int stride_;
  std::deque<Cut> cuts_;  // ascending steps
  // The last dropped cut's index and blocks, emptied, for the next to open
  // (an undo cut opens every step: no allocation or rehashing then); not
  // kept when it held more than a step's worth of rows.
  std::optional<Cut> spare_;
  int64_t floor_ = -1;    // no cut <= this opens (copied, or dropped)
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_ROW_CUTS_H_
