#include "server/ps/embedding/admission.h"

#include <algorithm>

#include "common/embedding/placement.h"

namespace fulcrum {

AdmissionSketch::AdmissionSketch(size_t width) : width_(64) {
  while (width_ < width) width_ *= 2;
  counters_.assign(kDepth * width_, 0);
}

size_t AdmissionSketch::Cell(int row, uint64_t h) const {
  // One independent mix per row.
  const uint64_t r = Mix64(h + 0x9e3779b97f4a7c15ULL * (row + 1));
  return row * width_ + (r & (width_ - 1));
}

uint32_t AdmissionSketch::Estimate(uint64_t id) const {
  const uint64_t h = Mix64(id ^ 0x3c6ef372fe94f82bULL);
  uint32_t est = 255;
  for (int row = 0; row < kDepth; ++row) {
    est = std::min<uint32_t>(est, counters_[Cell(row, h)]);
  }
  return est;
}

uint32_t AdmissionSketch::Add(uint64_t id, uint32_t n) {
  const uint64_t h = Mix64(id ^ 0x3c6ef372fe94f82bULL);
  size_t cell[kDepth];
  uint32_t est = 255;
  for (int row = 0; row < kDepth; ++row) {
    cell[row] = Cell(row, h);
    est = std::min<uint32_t>(est, counters_[cell[row]]);
  }
  const uint32_t want = std::min<uint32_t>(255, est + std::min<uint32_t>(n, 255));
  for (int row = 0; row < kDepth; ++row) {  // conservative update
    if (counters_[cell[row]] < want) counters_[cell[row]] = want;
  }
  added_ += n;
  if (added_ >= 8 * width_) Halve();
  return want;
}

void AdmissionSketch::Halve() {
  for (uint8_t& c : counters_) c >>= 1;
  added_ = 0;
}

}  // namespace fulcrum
