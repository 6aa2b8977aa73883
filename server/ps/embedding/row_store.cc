#include "server/ps/embedding/row_store.h"

#include <algorithm>
#include <cstring>

namespace fulcrum {
namespace {

constexpr int kLfuSamples = 8;

uint64_t NextRandom(uint64_t* s) {  // xorshift64*
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545f4914f6cdd1dULL;
}

}  // namespace

RowStore::RowStore(const RowStoreConfig& config)
    : config_(config),
      stride_(config.dim + config.optimizer.StateFloats(config.dim)),
      rows_per_block_(static_cast<uint32_t>(
          std::min<int64_t>(1024, std::max<int64_t>(1, config.capacity)))),
      index_(KeyOf{this}),
      cuts_(stride_),
      undo_(stride_),
      rng_(config.seed | 1) {
  if (config_.min_count > 1) {
    // About two counters per row the store may hold: few collisions among
    // the ids that compete for admission at once.
    sketch_.emplace(static_cast<size_t>(
        std::clamp<int64_t>(2 * config_.capacity, 1024, int64_t{1} << 24)));
  }
}

void RowStore::Read(uint64_t id, float* out) const {
  const uint32_t slot = index_.Find(id);
  if (slot == kNone) {
    InitialRow(config_.init, id, config_.dim, out);
    return;
  }
  std::memcpy(out, row(slot), sizeof(float) * config_.dim);
}

const float* RowStore::State(uint64_t id) const {
  const uint32_t slot = index_.Find(id);
  return slot == kNone ? nullptr : row(slot) + config_.dim;
}

RowStore::Pushed RowStore::Push(uint64_t id, const float* g, uint32_t count,
                                int64_t now, int64_t step) {
  if (config_.undoable && step > newest_step_) {
    undo_.Set({1, step - 1, step});  // the cut at the newest step only
    newest_step_ = step;
  }
  uint32_t slot = index_.Find(id);
  Pushed result = Pushed::kApplied;
  const bool cuts = step >= 0 && (!cuts_.empty() || !undo_.empty());
  if (slot == kNone) {
    if (sketch_.has_value() &&
        sketch_->Add(id, std::max<uint32_t>(count, 1)) <
            static_cast<uint32_t>(config_.min_count)) {
      ++stats_.pending_pushes;
      return Pushed::kPending;
    }
    if (cuts) SaveImages(id, step, nullptr, 0);  // no row at those cuts
    slot = TakeSlot(cuts ? step : -1);
    Meta& m = meta(slot);
    m.id = id;
    m.freq = 0;
    float* r = row(slot);
    InitialRow(config_.init, id, config_.dim, r);
    config_.optimizer.InitState(r + config_.dim, config_.dim);
    index_.Insert(id, slot);
    LinkFront(slot);
    ++stats_.created;
    ++stats_.resident;
    result = Pushed::kCreated;
  } else {
    if (cuts) SaveImages(id, step, row(slot), meta(slot).freq);
    if (head_ != slot) {
      Unlink(slot);
      LinkFront(slot);
    }
  }
  meta(slot).touch = static_cast<int32_t>(now);
  AddFrequency(slot, std::max<uint32_t>(count, 1));
  float* r = row(slot);
  config_.optimizer.Apply(r, r + config_.dim, g, config_.dim);
  SetChanged(slot, true);
  if (cuts) StepLaterImages(id, step, g, count);
  return result;
}

void RowStore::SaveImages(uint64_t id, int64_t step, const float* record,
                          uint32_t freq) {
  cuts_.Save(id, step, record, freq);
  undo_.Save(id, step, record, freq);
}

void RowStore::StepLaterImages(uint64_t id, int64_t step, const float* g,
                               uint32_t count) {
  // A push of an earlier step than a cut whose image this row has: the
  // image takes it too (created, if the row did not exist at the cut).
  const auto step_image = [&](RowCuts::Image& image) {
    float* rec = image.record;
    if (!image.resident) {
      InitialRow(config_.init, id, config_.dim, rec);
      config_.optimizer.InitState(rec + config_.dim, config_.dim);
      image.resident = true;
      image.freq = 0;
    }
    const uint32_t c = std::max<uint32_t>(count, 1);
    image.freq = image.freq > ~uint32_t{0} - c ? ~uint32_t{0} : image.freq + c;
    config_.optimizer.Apply(rec, rec + config_.dim, g, config_.dim);
  };
  cuts_.ForLater(id, step, step_image);
  undo_.ForLater(id, step, step_image);
}

bool RowStore::Undo(int64_t to, int64_t now) {
  bool ok = true;
  if (newest_step_ >= to && !undo_.Has(to)) {
    ok = false;
  } else if (newest_step_ >= to) {
    // Rows created since the cut go first (their slots are free again),
    // then the cut's rows come back: as many as were resident at the cut.
    undo_.ForEach(to, [&](uint64_t id, const RowCuts::Image& image) {
      if (image.resident) return;
      const uint32_t slot = index_.Find(id);
      if (slot != kNone) Remove(slot);
      ++stats_.undone;
    });
    undo_.ForEach(to, [&](uint64_t id, const RowCuts::Image& image) {
      if (!image.resident) return;
      SetChanged(Place(id, image.record, image.freq, now), true);
      ++stats_.undone;
    });
  }
  undo_.Reset();
  newest_step_ = std::min(newest_step_, to - 1);
  return ok;
}

uint32_t RowStore::TakeSlot(int64_t step) {
  if (!free_.empty()) {
    const uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  if (slots_ < config_.capacity) {
    const uint32_t slot = slots_++;
    if (slot / rows_per_block_ >= rows_.size()) {
      rows_.push_back(std::make_unique<float[]>(
          static_cast<size_t>(rows_per_block_) * stride_));
      meta_.push_back(std::make_unique<Meta[]>(rows_per_block_));
    }
    if (slot / 64 >= changed_.size()) changed_.push_back(0);
    return slot;
  }
  const uint32_t slot = Victim();
  if (step >= 0) SaveImages(meta(slot).id, step, row(slot), meta(slot).freq);
  Unlink(slot);
  index_.Erase(meta(slot).id);
  --stats_.resident;
  ++stats_.evicted_capacity;
  return slot;
}

uint32_t RowStore::Victim() {
  if (config_.eviction == RowStoreConfig::Eviction::kLru) return tail_;
  // All slots hold rows here (no free slot, capacity reached).
  uint32_t best = kNone;
  for (int i = 0; i < kLfuSamples; ++i) {
    const uint32_t s = static_cast<uint32_t>(NextRandom(&rng_) % slots_);
    if (best == kNone || meta(s).freq < meta(best).freq ||
        (meta(s).freq == meta(best).freq && meta(s).touch < meta(best).touch)) {
      best = s;
    }
  }
  return best;
}

void RowStore::AddFrequency(uint32_t slot, uint32_t count) {
  Meta& m = meta(slot);
  m.freq = m.freq > ~uint32_t{0} - count ? ~uint32_t{0} : m.freq + count;
  freq_added_ += count;
  if (config_.eviction != RowStoreConfig::Eviction::kLfu ||
      freq_added_ < 16 * static_cast<uint64_t>(config_.capacity)) {
    return;
  }
  // Age: what was popular long ago counts half.
  for (uint32_t s = 0; s < slots_; ++s) meta(s).freq >>= 1;
  freq_added_ = 0;
}

void RowStore::Unlink(uint32_t slot) {
  Meta& m = meta(slot);
  if (m.prev != kNone) meta(m.prev).next = m.next; else head_ = m.next;
  if (m.next != kNone) meta(m.next).prev = m.prev; else tail_ = m.prev;
}

void RowStore::LinkFront(uint32_t slot) {
  Meta& m = meta(slot);
  m.prev = kNone;
  m.next = head_;
  if (head_ != kNone) meta(head_).prev = slot;
  head_ = slot;
  if (tail_ == kNone) tail_ = slot;
}

void RowStore::Remove(uint32_t slot) {
  Unlink(slot);
  index_.Erase(meta(slot).id);
  free_.push_back(slot);
  --stats_.resident;
}

int64_t RowStore::Expire(int64_t now, int64_t max_rows) {
  if (config_.ttl_seconds <= 0) return 0;
  int64_t n = 0;
  while (n < max_rows && tail_ != kNone &&
         now - meta(tail_).touch >= config_.ttl_seconds) {
    // After every open cut: each keeps the row.
    SaveImages(meta(tail_).id, RowCuts::kAfterAll, row(tail_),
               meta(tail_).freq);
    Remove(tail_);
    ++stats_.evicted_ttl;
    ++n;
  }
  return n;
}

RowStore::Stats RowStore::stats() const {
  Stats s = stats_;
  s.bytes = static_cast<int64_t>(
      rows_.size() * rows_per_block_ * (stride_ * sizeof(float) + sizeof(Meta)) +
      changed_.capacity() * sizeof(uint64_t) +
      index_.bytes() + free_.capacity() * sizeof(uint32_t) +
      (sketch_.has_value() ? sketch_->bytes() : 0) + cuts_.bytes() +
      undo_.bytes());
  s.cut_rows = cuts_.images();
  s.undo_rows = undo_.images();
  return s;
}

void RowStore::Clear() {
  rows_.clear();
  meta_.clear();
  slots_ = 0;
  free_.clear();
  free_.shrink_to_fit();
  changed_.clear();
  changed_.shrink_to_fit();
  index_ = RowIndex<KeyOf>(KeyOf{this});
  head_ = tail_ = kNone;
  freq_added_ = 0;
  stats_.resident = 0;
  cuts_.Reset();
  undo_.Reset();
  newest_step_ = -1;
}

void RowStore::Insert(uint64_t id, const float* record, uint32_t freq,
                      int64_t now) {
  SetChanged(Place(id, record, freq, now), false);
}

uint32_t RowStore::Place(uint64_t id, const float* record, uint32_t freq,
                         int64_t now) {
  uint32_t slot = index_.Find(id);
  if (slot == kNone) {
    slot = TakeSlot();
    meta(slot).id = id;
    index_.Insert(id, slot);
    LinkFront(slot);
    ++stats_.resident;
  } else if (head_ != slot) {
    Unlink(slot);
    LinkFront(slot);
  }
  meta(slot).touch = static_cast<int32_t>(now);
  meta(slot).freq = freq;
  std::memcpy(row(slot), record, sizeof(float) * stride_);
  return slot;
}

void RowStore::ForEachRecordSince(
    bool forget,
    const std::function<void(uint64_t, uint32_t, const float*, bool)>& fn,
    int64_t cut) {
  if (cut < 0 || cuts_.empty()) {
    for (uint32_t s = head_; s != kNone; s = meta(s).next)
      fn(meta(s).id, meta(s).freq, row(s), Changed(s));
    if (forget) std::fill(changed_.begin(), changed_.end(), 0);
    if (cut >= 0) cuts_.DropThrough(cut);
    return;
  }
  for (uint32_t s = head_; s != kNone; s = meta(s).next) {
    const RowCuts::Image* image = cuts_.Find(cut, meta(s).id);
    if (image == nullptr) {
      fn(meta(s).id, meta(s).freq, row(s), Changed(s));
      if (forget) SetChanged(s, false);
      continue;
    }
    if (image->resident) fn(meta(s).id, image->freq, image->record, true);
    if (forget) SetChanged(s, true);  // the live row is past the copy
  }
  // Rows at the cut that eviction or ttl removed since.
  cuts_.ForEach(cut, [&](uint64_t id, const RowCuts::Image& image) {
    if (image.resident && index_.Find(id) == kNone)
      fn(id, image.freq, image.record, true);
  });
  cuts_.DropThrough(cut);
}

void RowStore::ForEachRecord(
    const std::function<void(uint64_t, uint32_t, const float*)>& fn) const {
  for (uint32_t s = head_; s != kNone; s = meta(s).next) {
    fn(meta(s).id, meta(s).freq, row(s));
  }
}

void RowStore::ForEachRow(
    const std::function<void(uint64_t, const float*, const float*)>& fn)
    const {
  for (uint32_t s = head_; s != kNone; s = meta(s).next) {
    fn(meta(s).id, row(s), row(s) + config_.dim);
  }
}

}  // namespace fulcrum
