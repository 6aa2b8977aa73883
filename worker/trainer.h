// One worker's training loop for one job assignment: loads (and caches) the
// data, keeps a model replica, pushes gradients partition by partition as
// backward produces them and trains on each new parameter version.
//
// Rank 0 also evaluates the test set every `eval_every_steps` steps; when
// the job's target accuracy is reached (or the job is cancelled) its next
// pushes carry `stop`, and every worker stops at the same version because
// the stop travels through the synchronous barrier itself.
#ifndef FULCRUM_WORKER_TRAINER_H_
#define FULCRUM_WORKER_TRAINER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "fulcrum/v1/job.pb.h"
#include "worker/backend/backend.h"
#include "worker/data/idx.h"
#include "worker/worker_metrics.h"

namespace fulcrum {

struct Assignment {
  std::string job_id;
  v1::JobSpec spec;
  int rank = 0;
  int world_size = 1;
  int64_t generation = 1;
  std::vector<std::string> shard_addresses;
};

// Receives progress from the training thread; tells it to stop; and, for
// elastic jobs, connects it to the coordinator.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void Update(const v1::Progress& progress) = 0;
  virtual bool Cancelled() = 0;
  // The job's assignment at a generation after `generation` (the old one
  // ended: membership changed or the job recovers from a lost shard), or
  // nullopt when the worker no longer has the job or `deadline` passes.
  virtual std::optional<Assignment> NextAssignment(const std::string& job_id,
                                                   int64_t generation,
                                                   absl::Time deadline) {
    return std::nullopt;
  }
  // Chunk sharding: reports finished chunks and leases the next one.
  virtual absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest& request) {
    return absl::UnimplementedError("no coordinator to lease chunks from");
  }
};

struct TrainResult {
  v1::Progress progress;       // final step, loss, test accuracy (rank 0)
  bool stopped_early = false;  // target reached or cancelled
  std::vector<float> params;   // final parameters (flat, layout order)
};

class Trainer {
 public:
  struct Options {
    std::string worker_id;
    absl::Duration step_timeout = absl::Minutes(5);
    int eval_batch = 1000;
    // Straggler injection for tests and benchmarks: every step sleeps
    // (slowdown - 1) times its own compute time, plus step_delay, plus a
    // uniform draw from [0, step_delay_jitter).
    double slowdown = 1.0;
    absl::Duration step_delay = absl::ZeroDuration();
    absl::Duration step_delay_jitter = absl::ZeroDuration();
    uint64_t delay_seed = 1;
    WorkerMetrics* metrics = nullptr;  // Not owned; may be null.
    // After the generation ended (ABORTED) or a shard stayed unreachable,
    // how long to wait for the next generation's assignment.
    absl::Duration rejoin_timeout = absl::Seconds(60);
    // Broken streams are re-opened within this long (PsClient).
    absl::Duration reconnect_timeout = absl::Seconds(30);
  };

  // `backend` is not owned and must outlive the trainer.
  Trainer(Backend* backend, Options options)
      : backend_(backend), options_(std::move(options)) {}

  // Trains until the last step, a stop, or an error. `sink` may be null.
  absl::StatusOr<TrainResult> Run(const Assignment& assignment,
                                  ProgressSink* sink);

  // Loads (and keeps) the job's training data, so that a later Run of the
  // job starts training at once: a worker joining a running job prepares
  // before the others wait for it. The errors Run would return for the
  // data.
  absl::Status Prepare(const v1::JobSpec& spec);

 private:
  absl::StatusOr<const LabeledImages*> Load(const v1::DatasetSpec& d,
                                            bool train, int classes);
  // The job's training split, checked against the model's input size.
  absl::StatusOr<const LabeledImages*> LoadTrain(const v1::JobSpec& spec);

  Backend* const backend_;  // Not owned.
  const Options options_;
  std::map<std::string, std::unique_ptr<LabeledImages>>
      cache_;  // by dir/split/limit
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_TRAINER_H_
