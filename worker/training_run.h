// One job's training on one worker: everything the step loop touches,
// allocated once (buffers page-locked for a GPU; the hot path allocates
// nothing), and the loop itself - generation by generation, step by step -
// over the Trainer's parts: DataSource (which samples), the Workload (the
// model and its data: gradients, evaluation by rank 0), GradientPusher
// (pushes during backward), the WorkerSession (parameters back) and
// StepStats (progress, metrics).
//
// Thread safety: none; one training thread runs it.
#ifndef FULCRUM_WORKER_TRAINING_RUN_H_
#define FULCRUM_WORKER_TRAINING_RUN_H_

#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/device_buffer.h"
#include "worker/data_source.h"
#include "worker/gradient_pusher.h"
#include "worker/step_stats.h"
#include "worker/trainer.h"
#include "worker/worker_session.h"
#include "worker/workload.h"

namespace fulcrum {

class TrainingRun {
 public:
  // Makes the job's workload once the run's layout is in place (it points
  // there).
  using WorkloadFactory =
      std::function<absl::StatusOr<std::unique_ptr<Workload>>(
          const ParameterLayout* layout)>;

  // Not owned, must outlive the run: backend, channels, link (may be null).
  static absl::StatusOr<std::unique_ptr<TrainingRun>> Create(
      Backend* backend, ChannelFactory* channels, JobLink* link,
      const Trainer::Options& options, const Assignment& assignment,
      ParameterLayout layout, const WorkloadFactory& make_workload);
  ~TrainingRun();

  absl::StatusOr<TrainResult> Run();

 private:
  TrainingRun(Backend* backend, ChannelFactory* channels, JobLink* link,
              const Trainer::Options& options, const Assignment& assignment,
              ParameterLayout layout);
  // The session's current generation, as a channel would reach it.
  ChannelOptions GenerationOptions() const;
  // One generation: join, train until the end, a stop or an error.
  absl::Status RunGeneration();
  absl::Status Step(int64_t step);
  // Computes the step's gradient and pushes it.
  absl::Status ComputeAndPush(int64_t step, const StepSamples& samples,
                              bool stop);
  absl::Status WaitForParameters(int64_t step, bool* stop);
  // Straggler injection (Trainer::Options).
  void InjectDelay(StepStats::Clock::time_point step_start);
  absl::Status Evaluate(int64_t at_step);
  bool rank0() const { return session_.assignment().rank == 0; }

  Backend* const backend_;  // Not owned.
  const Trainer::Options options_;
  const v1::JobSpec spec_;
  const ParameterLayout layout_;
  const int64_t total_;
  const WorkerMetrics::Job metrics_;
  // Host buffers the data plane reads and writes; declared before the
  // session so that its channel stops writing into them first.
  std::vector<float> params_, grads_;
  float* registered_params_ = nullptr;  // params_'s buffer, page-locked
  DeviceBuffer params_dev_, grads_dev_;
  std::unique_ptr<Workload> workload_;
  WorkerSession session_;
  std::unique_ptr<DataSource> source_;
  GradientPusher pusher_;
  TrainResult result_;
  StepStats stats_;
  std::mt19937_64 delay_rng_;
  bool stop_next_ = false;  // rank 0: the target is reached
  bool stopped_ = false;    // a stop came back with the parameters
  // Sync or ssp(0): the shards' barrier, where a stop step applies nothing.
  const bool barrier_ = spec_.consistency().mode() == "sync" ||
                        (spec_.consistency().mode() == "ssp" &&
                         spec_.consistency().staleness() == 0);
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_TRAINING_RUN_H_
