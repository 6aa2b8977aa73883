// One worker's training of one job assignment with the built-in models:
// loads (and caches) the data, keeps a model replica, and drives a
// WorkerSession (membership, data plane) through the step loop of a
// TrainingRun (training_run.h): data source, gradient pusher, step
// statistics, evaluator. Holds no gRPC type: the transport is the
// ChannelFactory's, the coordinator the JobLink's.
//
// Rank 0 also evaluates the test set every `eval_every_steps` steps; when
// the job's target accuracy is reached (or the job is cancelled) its next
// pushes carry `stop`, and every worker stops at the same version because
// the stop travels through the synchronous barrier itself.
#ifndef FULCRUM_WORKER_TRAINER_H_
#define FULCRUM_WORKER_TRAINER_H_

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/dataplane/parameter_channel.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "fulcrum/v1/job.pb.h"
#include "worker/backend/backend.h"
#include "worker/data/criteo.h"
#include "worker/data/idx.h"
#include "worker/job_link.h"
#include "worker/worker_metrics.h"
#include "worker/workload.h"

namespace fulcrum {

struct TrainResult {
  v1::Progress progress;       // final step, loss, test accuracy (rank 0)
  bool stopped_early = false;  // target reached or cancelled
  std::vector<float> params;   // final parameters (flat, layout order)
};

class Trainer {
 public:
  struct Options {
    std::string worker_id;
    // dataset.dir is resolved under it and may not lead out of it
    // (fulcrum-worker --data_root); empty: as given (tests).
    std::string data_root;
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
    // Broken connections are re-opened within this long.
    absl::Duration reconnect_timeout = absl::Seconds(30);
  };

  // `backend` and `channels` are not owned and must outlive the trainer.
  Trainer(Backend* backend, ChannelFactory* channels, Options options)
      : backend_(backend), channels_(channels), options_(std::move(options)) {}

  // Trains until the last step, a stop, or an error. `link` (not owned) may
  // be null: static sharding, no re-joining.
  absl::StatusOr<TrainResult> Run(const Assignment& assignment, JobLink* link);

  // Loads (and keeps) the job's training data, so that a later Run of the
  // job starts training at once: a worker joining a running job prepares
  // before the others wait for it. The errors Run would return for the
  // data.
  absl::Status Prepare(const v1::JobSpec& spec);

  // The member id later Runs use (Options::worker_id at first): a worker
  // whose lease expired registers again under a new id, and its next job
  // must be trained under that one, data plane included.
  void set_worker_id(std::string id) { worker_id_ = std::move(id); }

 private:
  absl::StatusOr<const LabeledImages*> Load(const v1::DatasetSpec& d,
                                            bool train, int classes);
  // The job's training split, checked against the model's input size.
  absl::StatusOr<const LabeledImages*> LoadTrain(const v1::JobSpec& spec);
  // dataset.format criteo (model embedding_mlp): train.tsv / test.tsv.
  absl::StatusOr<const ClickLogs*> LoadClicks(const v1::DatasetSpec& d,
                                              bool train);
  // dataset.dir under Options::data_root (INVALID_ARGUMENT naming
  // dataset.dir when it leads out).
  absl::StatusOr<std::string> DatasetDir(const v1::DatasetSpec& d) const;
  // Evaluation batches: Options::eval_batch, at least the job's batch.
  int EvalBatch(const v1::JobSpec& spec) const {
    return std::max(spec.batch_size(), options_.eval_batch);
  }
  // The workload of model.type embedding_mlp.
  absl::StatusOr<std::unique_ptr<Workload>> CtrWorkloadFor(
      const v1::JobSpec& spec, const ParameterLayout* layout);

  Backend* const backend_;          // Not owned.
  ChannelFactory* const channels_;  // Not owned.
  const Options options_;
  std::string worker_id_ = options_.worker_id;
  std::map<std::string, std::unique_ptr<LabeledImages>>
      cache_;  // by dir/split/limit
  std::map<std::string, std::unique_ptr<ClickLogs>>
      clicks_;  // by dir/split/limit
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_TRAINER_H_
