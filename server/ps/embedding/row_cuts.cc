#include "server/ps/embedding/row_cuts.h"

#include <algorithm>
#include <cstring>

namespace fulcrum {
namespace {

constexpr size_t kRecordsPerBlock = 256;
// A dropped cut's memory is kept for the next one up to this many records.
constexpr size_t kMaxSpareRecords = size_t{1} << 16;

}  // namespace

float* RowCuts::Cut::NewRecord(int stride) {
  if (in_use == 0 || used == kRecordsPerBlock) {
    if (in_use == blocks.size()) {
      blocks.push_back(std::make_unique<float[]>(
          kRecordsPerBlock * static_cast<size_t>(stride)));
    }
    ++in_use;
    used = 0;
  }
  return blocks[in_use - 1].get() + (used++) * static_cast<size_t>(stride);
}

void RowCuts::Set(const CutWindow& window) {
  if (window.every <= 0) return;
  DropThrough(window.lo);
  // Open from the lowest multiple above everything copied or open.
  int64_t from = std::max(floor_, window.lo);
  if (!cuts_.empty()) from = std::max(from, cuts_.back().step);
  for (int64_t c = (from / window.every + 1) * window.every; c <= window.hi;
       c += window.every) {
    Open(c);
  }
}

void RowCuts::Reset() {
  cuts_.clear();
  spare_.reset();
  floor_ = -1;
}

RowCuts::Cut* RowCuts::Open(int64_t step) {
  if (spare_.has_value()) {
    cuts_.push_back(std::move(*spare_));
    spare_.reset();
  } else {
    cuts_.emplace_back();
  }
  cuts_.back().step = step;
  return &cuts_.back();
}

void RowCuts::Save(uint64_t id, int64_t step, const float* record,
                   uint32_t freq) {
  for (Cut& cut : cuts_) {
    if (cut.step > step) break;
    auto [it, inserted] = cut.images.try_emplace(id);
    if (!inserted) continue;
    Image& image = it->second;
    image.resident = record != nullptr;
    image.freq = freq;
    // A record for every image: a later push of an earlier step may create
    // the row at the cut (ForLater).
    image.record = cut.NewRecord(stride_);
    if (record != nullptr)
      std::memcpy(image.record, record, sizeof(float) * stride_);
  }
}

void RowCuts::ForLater(uint64_t id, int64_t step,
                       absl::FunctionRef<void(Image&)> fn) {
  if (cuts_.empty() || cuts_.back().step <= step) return;
  for (Cut& cut : cuts_) {
    if (cut.step <= step) continue;
    auto it = cut.images.find(id);
    if (it != cut.images.end()) fn(it->second);
  }
}

bool RowCuts::Has(int64_t cut) const {
  for (const Cut& c : cuts_) {
    if (c.step == cut) return true;
  }
  return false;
}

const RowCuts::Image* RowCuts::Find(int64_t cut, uint64_t id) const {
  for (const Cut& c : cuts_) {
    if (c.step != cut) continue;
    auto it = c.images.find(id);
    return it == c.images.end() ? nullptr : &it->second;
  }
  return nullptr;
}

void RowCuts::ForEach(
    int64_t cut,
    absl::FunctionRef<void(uint64_t, const Image&)> fn) const {
  for (const Cut& c : cuts_) {
    if (c.step != cut) continue;
    for (const auto& [id, image] : c.images) fn(id, image);
  }
}

void RowCuts::DropThrough(int64_t cut) {
  while (!cuts_.empty() && cuts_.front().step <= cut) {
    Cut& c = cuts_.front();
    if (c.blocks.size() * kRecordsPerBlock <= kMaxSpareRecords) {
      // Keeps the index's array (clear() would free a large one).
      c.images.erase(c.images.begin(), c.images.end());
      c.used = 0;
      c.in_use = 0;
      spare_ = std::move(c);
    }
    cuts_.pop_front();
  }
  floor_ = std::max(floor_, cut);
}

int64_t RowCuts::images() const {
  int64_t n = 0;
  for (const Cut& c : cuts_) n += static_cast<int64_t>(c.images.size());
  return n;
}

int64_t RowCuts::bytes() const {
  const auto bytes = [&](const Cut& c) {
    return static_cast<int64_t>(
        c.blocks.size() * kRecordsPerBlock * stride_ * sizeof(float) +
        c.images.capacity() * (sizeof(uint64_t) + sizeof(Image) + 1));
  };
  int64_t n = spare_.has_value() ? bytes(*spare_) : 0;
  for (const Cut& c : cuts_) n += bytes(c);
  return n;
}

}  // namespace fulcrum
