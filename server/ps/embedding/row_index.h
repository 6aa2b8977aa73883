// An open-addressing index from row id to row slot for one RowStore. A
// bucket is 8 bytes (the slot and 32 bits of the id's hash); the ids
// themselves live in the store's slot metadata, read through `KeyOf` only
// when the hash bits match. Linear probing with backward-shift deletion
// (no tombstones). The load stays in [3/8, 3/4] while rows are added (11
// to 21 bytes per row) and is halved back once it falls below 3/16.
//
// Thread safety: none (the store's lock covers it).
#ifndef FULCRUM_SERVER_PS_EMBEDDING_ROW_INDEX_H_
#define FULCRUM_SERVER_PS_EMBEDDING_ROW_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/embedding/placement.h"

namespace fulcrum {

// KeyOf: uint64_t operator()(uint32_t slot) const, the id in `slot`.
template <typename KeyOf>
class RowIndex {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};

  explicit RowIndex(KeyOf key_of) : key_of_(key_of) { Resize(16); }

  // The slot holding `id`, or kNone.
  uint32_t Find(uint64_t id) const {
    const uint64_t h = Hash(id);
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Bucket& b = buckets_[i];
      if (b.slot == kNone) return kNone;
      if (b.tag == tag && key_of_(b.slot) == id) return b.slot;
    }
  }

  // REQUIRES: `id` is not in the index; key_of(slot) == id.
  void Insert(uint64_t id, uint32_t slot) {
    if ((size_ + 1) * 4 > (mask_ + 1) * 3) Resize(2 * (mask_ + 1));
    Place(Hash(id), slot);
    ++size_;
  }

  // Removes `id`; false when it was not there.
  bool Erase(uint64_t id) {
    const uint64_t h = Hash(id);
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    size_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      const Bucket& b = buckets_[i];
      if (b.slot == kNone) return false;
      if (b.tag == tag && key_of_(b.slot) == id) break;
    }
    // Backward shift: move later entries of the run into the hole unless
    // their home lies cyclically in (hole, j].
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      Bucket& b = buckets_[j];
      if (b.slot == kNone) break;
      const size_t home = Hash(key_of_(b.slot)) & mask_;
      const bool stays = i <= j ? (home > i && home <= j)
                                : (home > i || home <= j);
      if (stays) continue;
      buckets_[i] = b;
      i = j;
    }
    buckets_[i].slot = kNone;
    --size_;
    if (size_ * 8 < (mask_ + 1) * 3 / 2 && mask_ + 1 > 16) {
      Resize((mask_ + 1) / 2);  // below 3/16: halve (lands at <= 3/8)
    }
    return true;
  }

  size_t size() const { return size_; }
  size_t bytes() const { return (mask_ + 1) * sizeof(Bucket); }

 private:
  struct Bucket {
    uint32_t slot = kNone;
    uint32_t tag = 0;
  };

  static uint64_t Hash(uint64_t id) {
    return Mix64(id ^ 0xbb67ae8584caa73bULL);  // not placement's salt
  }

  void Place(uint64_t h, uint32_t slot) {
    size_t i = h & mask_;
    while (buckets_[i].slot != kNone) i = (i + 1) & mask_;
    buckets_[i] = Bucket{slot, static_cast<uint32_t>(h >> 32)};
  }

  void Resize(size_t buckets) {
    std::unique_ptr<Bucket[]> old = std::move(buckets_);
    const size_t old_n = buckets_n_;
    buckets_ = std::make_unique<Bucket[]>(buckets);
    buckets_n_ = buckets;
    mask_ = buckets - 1;
    for (size_t i = 0; i < old_n; ++i) {
      if (old[i].slot != kNone) Place(Hash(key_of_(old[i].slot)), old[i].slot);
    }
  }

  KeyOf key_of_;
  std::unique_ptr<Bucket[]> buckets_;
  size_t buckets_n_ = 0;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_ROW_INDEX_H_
