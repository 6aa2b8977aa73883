// Which samples a worker trains on: a seeded per-epoch shuffle, cut into
// global batches of world * batch samples; rank r takes the r-th slice of
// every global batch. N workers with batch b thus see exactly the samples
// one worker with batch N*b sees, which is what makes sync training
// equivalent to large-batch training.
#ifndef FULCRUM_WORKER_DATA_SAMPLER_H_
#define FULCRUM_WORKER_DATA_SAMPLER_H_

#include <array>
#include <cstdint>
#include <vector>

#include "worker/data/idx.h"

namespace fulcrum {

// Writes the epoch's permutation of [0, n) into *order (resized to n; no
// allocation when it already has capacity). Portable: depends only on
// (seed, epoch, n).
void EpochOrder(uint64_t seed, int64_t epoch, int64_t n,
                std::vector<int64_t>* order);

int64_t StepsPerEpoch(int64_t n, int world, int batch);

// Positions [begin, begin + count) of the epoch order that `rank` trains on
// at `step_in_epoch`. count may be 0 (a short last global batch).
struct Share {
  int64_t begin = 0;
  int64_t count = 0;
};
Share WorkerShare(int64_t n, int64_t step_in_epoch, int rank, int world,
                  int batch);

// Converts uint8 pixels to standardised floats while gathering a batch.
class BatchGatherer {
 public:
  // Mean and standard deviation come from `train` pixels (computed once).
  explicit BatchGatherer(const IdxImages& train);

  // Gathers rows order[share.begin .. +count) of `images`/`labels` into x
  // ([count x pixels], host memory) and y.
  void Gather(const IdxImages& images, const std::vector<int32_t>& labels,
              const int64_t* order, int64_t count, float* x, int32_t* y) const;
  // Gathers rows [first, first + count) in file order (evaluation).
  void GatherRange(const IdxImages& images, const std::vector<int32_t>& labels,
                   int64_t first, int64_t count, float* x, int32_t* y) const;

 private:
  std::array<float, 256> table_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_SAMPLER_H_
