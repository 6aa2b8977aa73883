// Admission counting for a table with min_count > 1: how many pushes
// touched an id that has no row yet, in fixed memory - a count-min sketch
// (4 rows of `width` saturating 8-bit counters, conservative update: only
// the smallest counters grow). Counts may be overestimated (an id may be
// admitted a little early), never under. Every 8 x width additions all
// counters are halved, so ids seen long ago fade (TinyLFU's reset).
//
// Thread safety: none (the store's lock covers it).
#ifndef FULCRUM_SERVER_PS_EMBEDDING_ADMISSION_H_
#define FULCRUM_SERVER_PS_EMBEDDING_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fulcrum {

class AdmissionSketch {
 public:
  // `width` is rounded up to a power of two, at least 64.
  explicit AdmissionSketch(size_t width);

  // Adds `n` occurrences of `id` and returns its estimated count (at most
  // 255).
  uint32_t Add(uint64_t id, uint32_t n);
  uint32_t Estimate(uint64_t id) const;

  size_t bytes() const { return counters_.size(); }

 private:
  static constexpr int kDepth = 4;
  size_t Cell(int row, uint64_t h) const;
  void Halve();

  size_t width_;
  std::vector<uint8_t> counters_;  // kDepth x width_
  uint64_t added_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_ADMISSION_H_
