#include "worker/training_run.h"

#include <algorithm>

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
  return s;
}

WorkerMetrics::Job MetricsFor(WorkerMetrics* m, const std::string& job_id) {
  return m == nullptr ? WorkerMetrics::Job{} : m->ForJob(job_id);
}

}  // namespace

TrainingRun::TrainingRun(Backend* backend, ChannelFactory* channels,
                         JobLink* link, const Trainer::Options& options,
                         const Assignment& assignment, ParameterLayout layout,
                         const LabeledImages* train, TestLoader load_test)
    : backend_(backend),
      options_(options),
      spec_(assignment.spec),
      layout_(std::move(layout)),
      train_(train),
      load_test_(std::move(load_test)),
      pixels_(static_cast<int64_t>(train->images.rows) * train->images.cols),
      total_(layout_.total_size()),
      metrics_(MetricsFor(options.metrics, assignment.job_id)),
      params_(total_),
      grads_(total_),
      x_(spec_.batch_size() * pixels_),
      y_(spec_.batch_size()),
      params_dev_(backend, params_.data(), total_),
      grads_dev_(backend, grads_.data(), total_),
      x_dev_(backend, x_.data(), spec_.batch_size() * pixels_),
      mlp_(backend, layout_, spec_.batch_size()),
      gather_(train->images),
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
  source_ = DataSource::ForSpec(spec_, train->images.count, &session_);
}

TrainingRun::~TrainingRun() {
  session_.Close().IgnoreError();
  backend_->UnregisterHost(registered_params_);
  backend_->UnregisterHost(grads_.data());
}

absl::StatusOr<std::unique_ptr<TrainingRun>> TrainingRun::Create(
    Backend* backend, ChannelFactory* channels, JobLink* link,
    const Trainer::Options& options, const Assignment& assignment,
    ParameterLayout layout, const LabeledImages* train, TestLoader load_test) {
  if (assignment.spec.dataset().sharding() == "chunks" && link == nullptr) {
    return absl::FailedPreconditionError(
        "dataset.sharding 'chunks' needs a coordinator to lease chunks from; "
        "use 'static'");
  }
  std::unique_ptr<TrainingRun> run(
      new TrainingRun(backend, channels, link, options, assignment,
                      std::move(layout), train, std::move(load_test)));
  RETURN_IF_ERROR(backend->status());  // every buffer was allocated
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
  if (rank0() && progress.evaluated_step() != progress.step()) {
    RETURN_IF_ERROR(LoadEvaluator());
    Evaluate(progress.step());
  }
  result_.stopped_early = stopped_;
  session_.Report(progress);
  result_.params = std::move(params_);  // the channel is closed
  return std::move(result_);
}

absl::Status TrainingRun::RunGeneration() {
  if (rank0()) RETURN_IF_ERROR(LoadEvaluator());
  // Copies of an ended generation land before its successor's arrive.
  backend_->Synchronize();
  ASSIGN_OR_RETURN(const int64_t first, session_.Join());
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
    Evaluate(step + 1);
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
    pusher_.PushEmpty(step, stop);
    return absl::OkStatus();
  }
  gather_.Gather(train_->images, train_->labels,
                 source_->order() + samples.share.begin, count, x_.data(),
                 y_.data());
  backend_->CopyToDevice(x_.data(), x_dev_.get(), count * pixels_);
  pusher_.Begin(step, count, stop, samples.range);
  const double loss = mlp_.ForwardBackward(
      params_dev_.get(), x_dev_.get(), y_.data(), static_cast<int>(count),
      grads_dev_.get(),
      [this](int64_t ready_from) { pusher_.Ready(ready_from); });
  RETURN_IF_ERROR(pusher_.Finish());
  stats_.Loss(loss);
  return absl::OkStatus();
}

absl::Status TrainingRun::WaitForParameters(int64_t step, bool* stop) {
  // GPU: each partition goes to the device as soon as it arrives, while
  // the others are still on the wire.
  const bool host = backend_->HostAccessible();
  RETURN_IF_ERROR(
      session_.WaitForParameters(step + 1, stop, [&](int32_t id) {
        if (host) return;
        const Partition& p = layout_.partitions()[id];
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

absl::Status TrainingRun::LoadEvaluator() {
  if (evaluator_ != nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const LabeledImages* test, load_test_());
  const int batch = std::max(spec_.batch_size(), options_.eval_batch);
  ASSIGN_OR_RETURN(evaluator_, Evaluator::Create(backend_, &layout_, &gather_,
                                                 test, batch));
  return absl::OkStatus();
}

void TrainingRun::Evaluate(int64_t at_step) {
  const Evaluation e = evaluator_->Evaluate(params_dev_.get());
  result_.progress.set_test_accuracy(e.accuracy);
  result_.progress.set_evaluated_step(at_step);
  if (metrics_.test_accuracy != nullptr) metrics_.test_accuracy->Set(e.accuracy);
}

}  // namespace fulcrum
