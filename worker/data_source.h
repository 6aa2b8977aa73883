// Which samples a worker trains on at each step - one of the Trainer's
// parts. Two sources:
//   static  rank r takes the r-th slice of every global batch of a seeded
//           per-epoch shuffle (data/sampler.h); deterministic, no
//           coordinator (the equivalence tests use it);
//   chunks  the worker leases chunks of the epoch order from the
//           coordinator through its WorkerSession and takes batches from
//           them; every sample is trained once per epoch whatever joins,
//           leaves and crashes (the shards' ledger is the truth).
//
// Thread safety: none; the training thread owns it.
#ifndef FULCRUM_WORKER_DATA_SOURCE_H_
#define FULCRUM_WORKER_DATA_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fulcrum/v1/job.pb.h"
#include "worker/data/sampler.h"
#include "worker/worker_session.h"

namespace fulcrum {

// One step's samples.
struct StepSamples {
  Share share;      // positions [begin, begin + count) of order()
  PushRange range;  // chunk sharding: the samples behind the gradient
  int64_t epoch = 0;
  bool exhausted = false;  // chunk sharding: nothing left to train: stop
};

class DataSource {
 public:
  // `session` is not owned and must outlive the source.
  static std::unique_ptr<DataSource> ForSpec(const v1::JobSpec& spec,
                                             int64_t dataset_size,
                                             WorkerSession* session);
  virtual ~DataSource() = default;

  // A new generation (the session's assignment) starts: leases, rank and
  // world size belong to it.
  virtual void StartGeneration() = 0;
  // The first step this generation does not train (exclusive).
  virtual int64_t StepLimit() const = 0;
  // The steps a full run takes at this world size (for progress).
  int64_t TotalSteps() const;
  // The samples of `step`; ABORTED: the generation ended.
  virtual absl::StatusOr<StepSamples> Next(int64_t step) = 0;
  // What Next(step) will return, where that is known without a side effect
  // (no lease to ask for, no new epoch order; order() stays as it is);
  // nullopt otherwise. Lets the next step begin while its parameters
  // arrive.
  virtual std::optional<StepSamples> Peek(int64_t step) const = 0;
  // The epoch order that shares index.
  const int64_t* order() const { return order_.data(); }

 protected:
  DataSource(const v1::JobSpec& spec, int64_t n, WorkerSession* session);
  // Makes order() the permutation of `epoch` (once per epoch).
  void UseEpoch(int64_t epoch);

  const v1::JobSpec spec_;
  const int64_t n_;
  WorkerSession* const session_;  // Not owned.
  std::vector<int64_t> order_;
  int64_t epoch_loaded_ = -1;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_SOURCE_H_
