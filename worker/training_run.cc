#include "worker/training_run.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

WorkerSession::Options SessionOptions(const Trainer::Options& o,
                                      const WorkerMetrics::Job& m) {
  WorkerSession::Options s;
  s.worker_id = o.worker_id;
  s.step_timeout = o.step_timeout;
  s.rejoin_timeout = o.rejoin_timeout;
  s.reconnect_timeout = o.reconnect_timeout;
  if (m.reconnects != nullptr) {
    metrics::Counter* reconnects = m.reconnects;
    s.on_reconnect = [reconnects] { reconnects->Increment(); };
  }
  if (metrics::Counter* waited = m.lease_wait_seconds; waited != nullptr) {
    s.on_coordinator_wait = [waited](absl::Duration d) {
      waited->Increment(absl::ToDoubleSeconds(d));
    };
  }
  return s;
}

WorkerMetrics::Job MetricsFor(WorkerMetrics* m, const std::string& job_id) {
  return m == nullptr ? WorkerMetrics::Job{} : m->ForJob(job_id);
}

}  // namespace

TrainingRun::TrainingRun(Backend* backend, ChannelFactory* channels,
                         JobLink* link, const Trainer::Options& options,
                         const Assignment& assignment, ParameterLayout layout)
    : backend_(backend),
      options_(options),
      spec_(assignment.spec),
      layout_(std::move(layout)),
      total_(layout_.total_size()),
      metrics_(MetricsFor(options.metrics, assignment.job_id)),
      params_(total_),
      grads_(total_),
      params_dev_(backend, params_.data(), total_),
      grads_dev_(backend, grads_.data(), total_),
      session_(SessionOptions(options, metrics_), assignment, &layout_,
               params_.data(), channels, link),
      pusher_(backend, &layout_, &session_, grads_.data(), grads_dev_.get()),
      stats_(metrics_, total_,
             ElementBytes(session_.gradient_encoding()),
             &result_.progress),
      delay_rng_(options.delay_seed) {
  // Page-locked for a GPU: copies run asynchronously at full bandwidth.
  registered_params_ = params_.data();  // Run() moves params_ out
  backend_->RegisterHost(registered_params_, total_);
  backend_->RegisterHost(grads_.data(), total_);
}

TrainingRun::~TrainingRun() {
  session_.Close().IgnoreError();
  backend_->UnregisterHost(registered_params_);
  backend_->UnregisterHost(grads_.data());
}

absl::StatusOr<std::unique_ptr<TrainingRun>> TrainingRun::Create(
    Backend* backend, ChannelFactory* channels, JobLink* link,
    const Trainer::Options& options, const Assignment& assignment,
    ParameterLayout layout, const WorkloadFactory& make_workload) {
  if (assignment.spec.dataset().sharding() == "chunks" && link == nullptr) {
    return absl::FailedPreconditionError(
        "dataset.sharding 'chunks' needs a coordinator to lease chunks from; "
        "use 'static'");
  }
  std::unique_ptr<TrainingRun> run(new TrainingRun(
      backend, channels, link, options, assignment, std::move(layout)));
  RETURN_IF_ERROR(backend->status());  // every buffer was allocated
  ASSIGN_OR_RETURN(run->workload_, make_workload(&run->layout_));
  run->source_ = DataSource::ForSpec(run->spec_, run->workload_->TrainSize(),
                                     &run->session_);
  return run;
}

absl::StatusOr<TrainResult> TrainingRun::Run() {
  for (;;) {
    absl::Status s = RunGeneration();
    if (s.ok()) break;
    // A new generation: leases, half-done steps and pending stops belong
    // to the old one; the shards say where to resume.
    RETURN_IF_ERROR(session_.NextGeneration(s));
    if (metrics_.rejoins != nullptr) metrics_.rejoins->Increment();
    stop_next_ = false;
  }
  v1::Progress& progress = result_.progress;
  if (rank0() && progress.evaluated_step() != progress.step())
    RETURN_IF_ERROR(Evaluate(progress.step()));
  result_.stopped_early = stopped_;
  session_.Report(progress);
  result_.params = std::move(params_);  // the channel is closed
  return std::move(result_);
}

absl::Status TrainingRun::RunGeneration() {
  // Copies of an ended generation land before its successor's arrive.
  backend_->Synchronize();
  ASSIGN_OR_RETURN(const int64_t first, session_.Join());
  RETURN_IF_ERROR(workload_->StartGeneration(session_.ChannelOptionsNow()));
  backend_->CopyToDevice(params_.data(), params_dev_.get(), total_);
  source_->StartGeneration();
  result_.progress.set_total_steps(source_->TotalSteps());
  for (int64_t step = first; step < source_->StepLimit() && !stopped_; ++step)
    RETURN_IF_ERROR(Step(step));
  absl::Status closed = session_.Close();
  // Once the job stopped, a stream ending badly afterwards changes nothing.
  if (!closed.ok() && !stopped_) return closed;
  return absl::OkStatus();
}

absl::Status TrainingRun::Step(int64_t step) {
  StepStats::Times t;
  t.start = StepStats::Clock::now();
  ASSIGN_OR_RETURN(const StepSamples samples, source_->Next(step));
  // This worker leaves (shutdown, or the job was cancelled): it stops
  // alone; the coordinator takes it out of the next generation.
  if (session_.Leaving()) {
    session_.Close().IgnoreError();
    return absl::CancelledError("worker leaving the job");
  }
  RETURN_IF_ERROR(
      ComputeAndPush(step, samples, stop_next_ || samples.exhausted));
  InjectDelay(t.start);
  t.computed = StepStats::Clock::now();
  bool stop_seen = false;
  RETURN_IF_ERROR(WaitForParameters(step, &stop_seen));
  t.received = StepStats::Clock::now();
  t.first_push = pusher_.first_push();
  // Under the barrier a step that carries a stop applies nothing (the
  // final parameters are those evaluated): it is not a trained step, and
  // "trained N steps" counts the updates (a 9,400-step job said 9,401).
  const bool applied = !(stop_seen && barrier_);
  if (applied) stats_.Step(step, samples.epoch, samples.share.count, t);
  stopped_ = stop_seen;
  if (rank0() && !stopped_ && (step + 1) % spec_.eval_every_steps() == 0) {
    RETURN_IF_ERROR(Evaluate(step + 1));
    stop_next_ = spec_.target_accuracy() > 0 &&
                 result_.progress.test_accuracy() >= spec_.target_accuracy();
  }
  session_.Report(result_.progress);
  return absl::OkStatus();
}

absl::Status TrainingRun::ComputeAndPush(int64_t step,
                                         const StepSamples& samples,
                                         bool stop) {
  const int64_t count = samples.share.count;
  if (count == 0) {
    RETURN_IF_ERROR(workload_->EmptyStep(step));
    pusher_.PushEmpty(step, stop);
    return absl::OkStatus();
  }
  pusher_.Begin(step, count, stop, samples.range);
  absl::StatusOr<double> loss = workload_->ComputeGradient(
      step,
      absl::MakeConstSpan(source_->order() + samples.share.begin, count),
      params_dev_.get(), grads_dev_.get(),
      [this](int64_t ready_from) { pusher_.Ready(ready_from); });
  // A failed step pushes no more of its gradient (what backward finished
  // went out already; the error ends the generation or the run).
  if (!loss.ok()) return loss.status();
  RETURN_IF_ERROR(pusher_.Finish());
  stats_.Loss(*loss);
  return absl::OkStatus();
}

absl::Status TrainingRun::WaitForParameters(int64_t step, bool* stop) {
  // Host: the next step begins while its parameters arrive, where its
  // samples are known already (the workload gathers them and computes what
  // the partitions that are in allow). GPU: each partition goes to the
  // device as soon as it arrives, while the others are still on the wire.
  const bool host = backend_->HostAccessible();
  std::optional<StepSamples> next;
  if (host && step + 1 < source_->StepLimit()) next = source_->Peek(step + 1);
  if (next.has_value() && next->share.count > 0) {
    workload_->PrepareStep(
        step + 1,
        absl::MakeConstSpan(source_->order() + next->share.begin,
                            next->share.count));
  }
  RETURN_IF_ERROR(
      session_.WaitForParameters(step + 1, stop, [&](int32_t id) {
        const Partition& p = layout_.partitions()[id];
        if (host) return workload_->ParametersArrived(p, params_dev_.get());
        backend_->CopyToDeviceAsync(params_.data() + p.offset,
                                    params_dev_.get() + p.offset, p.size);
      }));
  // The next step's kernels start once the parameters have landed.
  backend_->ComputeWaitsForCopies();
  return absl::OkStatus();
}

void TrainingRun::InjectDelay(StepStats::Clock::time_point step_start) {
  absl::Duration delay =
      options_.step_delay +
      options_.step_delay_jitter *
          std::uniform_real_distribution<double>(0.0, 1.0)(delay_rng_);
  if (options_.slowdown > 1.0) {
    delay += absl::FromChrono(StepStats::Clock::now() - step_start) *
             (options_.slowdown - 1.0);
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
}

absl::Status TrainingRun::Evaluate(int64_t at_step) {
  ASSIGN_OR_RETURN(const Evaluation e, workload_->Evaluate(params_dev_.get()));
  result_.progress.set_test_accuracy(e.score);
  result_.progress.set_evaluated_step(at_step);
  if (metrics_.test_accuracy != nullptr) metrics_.test_accuracy->Set(e.score);
  return absl::OkStatus();
}

}  // namespace fulcrum
