#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "common/tensor/layout.h"
#include "worker/data/sampler.h"
#include "worker/model/mlp.h"
#include "worker/ps_client.h"

namespace fulcrum {
namespace {

// A buffer in backend memory, or an alias of host memory when the backend
// can use host memory directly.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend* b, float* host, int64_t n)
      : backend_(b), ptr_(b->HostAccessible() ? host : b->Allocate(n)) {}
  ~DeviceBuffer() {
    if (!backend_->HostAccessible()) backend_->Free(ptr_);
  }
  float* get() const { return ptr_; }

 private:
  Backend* backend_;
  float* ptr_;
};

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

Evaluation Evaluate(Backend* backend, Mlp& mlp, const float* params,
                    const LabeledImages& test, const BatchGatherer& gather,
                    int batch, std::vector<float>& x_host,
                    std::vector<int32_t>& y, float* x_dev) {
  int64_t correct = 0;
  double loss = 0;
  const int64_t n = test.images.count;
  const int64_t pixels =
      static_cast<int64_t>(test.images.rows) * test.images.cols;
  for (int64_t first = 0; first < n; first += batch) {
    const int64_t count = std::min<int64_t>(batch, n - first);
    gather.GatherRange(test.images, test.labels, first, count, x_host.data(),
                       y.data());
    backend->CopyToDevice(x_host.data(), x_dev, count * pixels);
    correct +=
        mlp.Evaluate(params, x_dev, y.data(), static_cast<int>(count), &loss);
  }
  return {n > 0 ? static_cast<double>(correct) / n : 0.0,
          n > 0 ? loss / n : 0.0};
}

}  // namespace

absl::StatusOr<const LabeledImages*> Trainer::Load(const v1::DatasetSpec& d,
                                                   bool train, int classes) {
  const std::string prefix = train ? "train" : "t10k";
  const int64_t limit = train ? d.train_limit() : d.test_limit();
  const std::string key =
      absl::StrCat(d.dir(), "|", prefix, "|", limit, "|", classes);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.get();
  ASSIGN_OR_RETURN(LabeledImages data,
                   LoadIdxSplit(d.dir(), prefix, limit, classes));
  auto owned = std::make_unique<LabeledImages>(std::move(data));
  const LabeledImages* raw = owned.get();
  cache_[key] = std::move(owned);
  return raw;
}

absl::StatusOr<TrainResult> Trainer::Run(const Assignment& a,
                                         ProgressSink* sink) {
  const v1::JobSpec& spec = a.spec;
  const std::vector<int> sizes(spec.model().layers().begin(),
                               spec.model().layers().end());
  ASSIGN_OR_RETURN(
      ParameterLayout layout,
      ParameterLayout::ForMlp(sizes, spec.shards(), spec.partition_bytes()));
  ASSIGN_OR_RETURN(const LabeledImages* train,
                   Load(spec.dataset(), true, sizes.back()));
  if (train->images.rows * train->images.cols != sizes.front()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[0] is ", sizes.front(), " but the images have ",
        train->images.rows * train->images.cols, " pixels"));
  }
  const LabeledImages* test = nullptr;
  if (a.rank == 0) {
    ASSIGN_OR_RETURN(test, Load(spec.dataset(), false, sizes.back()));
  }
  const BatchGatherer gather(train->images);
  const int batch = spec.batch_size();
  const int64_t pixels = sizes.front();
  const int64_t total = layout.total_size();

  // Everything the step loop touches is allocated here, once.
  std::vector<float> params(total), grads(total);
  DeviceBuffer params_dev(backend_, params.data(), total);
  DeviceBuffer grads_dev(backend_, grads.data(), total);
  const int eval_batch = std::max(batch, options_.eval_batch);
  std::vector<float> x_host(static_cast<int64_t>(eval_batch) * pixels);
  std::vector<int32_t> y(eval_batch);
  DeviceBuffer x_dev(backend_, x_host.data(),
                     static_cast<int64_t>(eval_batch) * pixels);
  Mlp mlp(backend_, layout, batch);
  std::unique_ptr<Mlp> eval_mlp =
      a.rank == 0 ? std::make_unique<Mlp>(backend_, layout, eval_batch)
                  : nullptr;
  std::vector<int64_t> order;
  order.reserve(train->images.count);

  PsClient::Options ps;
  ps.job_id = a.job_id;
  ps.worker_id = options_.worker_id;
  ps.generation = a.generation;
  ps.shard_addresses = a.shard_addresses;
  ps.chunk_bytes = spec.chunk_bytes();
  PsClient client(ps, &layout, params.data());
  ASSIGN_OR_RETURN(int64_t version, client.Connect());
  backend_->CopyToDevice(params.data(), params_dev.get(), total);

  const int64_t n = train->images.count;
  const int64_t per_epoch = StepsPerEpoch(n, a.world_size, batch);
  int64_t last_step = per_epoch * spec.epochs();
  if (spec.max_steps() > 0) last_step = std::min(last_step, spec.max_steps());

  // Partitions in the order backward completes them (last layer first).
  const std::vector<Partition>& parts = layout.partitions();
  TrainResult result;
  v1::Progress& progress = result.progress;
  progress.set_total_steps(last_step);
  std::mt19937_64 delay_rng(options_.delay_seed);
  WorkerMetrics::Job m{};
  if (options_.metrics != nullptr) m = options_.metrics->ForJob(a.job_id);
  int64_t epoch_loaded = -1;
  bool stop_next = false, stopped = false;
  double loss_avg = 0;
  auto window_start = std::chrono::steady_clock::now();
  int64_t window_samples = 0;
  auto evaluate = [&](int64_t at_step) {
    Evaluation e = Evaluate(backend_, *eval_mlp, params_dev.get(), *test,
                            gather, eval_batch, x_host, y, x_dev.get());
    progress.set_test_accuracy(e.accuracy);
    progress.set_evaluated_step(at_step);
    if (m.test_accuracy != nullptr) m.test_accuracy->Set(e.accuracy);
    return e;
  };

  for (int64_t step = version; step < last_step && !stopped; ++step) {
    const int64_t epoch = step / per_epoch;
    if (epoch != epoch_loaded) {
      EpochOrder(spec.seed(), epoch, n, &order);
      epoch_loaded = epoch;
    }
    const auto step_start = std::chrono::steady_clock::now();
    const Share share =
        WorkerShare(n, step % per_epoch, a.rank, a.world_size, batch);
    const bool stop = stop_next || (sink != nullptr && sink->Cancelled());
    if (share.count > 0) {
      gather.Gather(train->images, train->labels, order.data() + share.begin,
                    share.count, x_host.data(), y.data());
      backend_->CopyToDevice(x_host.data(), x_dev.get(), share.count * pixels);
      int next = static_cast<int>(parts.size()) - 1;  // next partition to push
      const double loss = mlp.ForwardBackward(
          params_dev.get(), x_dev.get(), y.data(),
          static_cast<int>(share.count), grads_dev.get(),
          [&](int64_t ready_from) {
            const int64_t first = next;
            while (next >= 0 && parts[next].offset >= ready_from) --next;
            if (next == first) return;
            const Partition& lo = parts[next + 1];
            const Partition& hi = parts[first];
            backend_->CopyToHost(grads_dev.get() + lo.offset,
                                 grads.data() + lo.offset,
                                 hi.offset + hi.size - lo.offset);
            for (int64_t id = first; id > next; --id) {
              client.Push(static_cast<int32_t>(id), step, share.count,
                          grads.data(), stop);
            }
          });
      loss_avg = step == version ? loss : 0.95 * loss_avg + 0.05 * loss;
    } else {
      for (int id = static_cast<int>(parts.size()) - 1; id >= 0; --id) {
        client.Push(id, step, 0, grads.data(), stop);
      }
    }
    absl::Duration delay =
        options_.step_delay +
        options_.step_delay_jitter *
            std::uniform_real_distribution<double>(0.0, 1.0)(delay_rng);
    if (options_.slowdown > 1.0) {
      delay += absl::FromChrono(std::chrono::steady_clock::now() - step_start) *
               (options_.slowdown - 1.0);
    }
    if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
    const auto computed = std::chrono::steady_clock::now();
    bool stop_seen = false;
    absl::Status s = client.WaitForClock(
        step + 1, absl::Now() + options_.step_timeout, &stop_seen);
    if (!s.ok()) return s;
    const auto received = std::chrono::steady_clock::now();
    const double compute_ms =
        std::chrono::duration<double, std::milli>(computed - step_start)
            .count();
    const double wait_ms =
        std::chrono::duration<double, std::milli>(received - computed).count();
    const double keep = step == version ? 0.0 : 0.95;
    progress.set_step_compute_ms(keep * progress.step_compute_ms() +
                                 (1 - keep) * compute_ms);
    progress.set_step_wait_ms(keep * progress.step_wait_ms() +
                              (1 - keep) * wait_ms);
    backend_->CopyToDevice(params.data(), params_dev.get(), total);
    stopped = stop_seen;

    if (m.steps != nullptr) {
      m.steps->Increment();
      m.samples->Increment(static_cast<double>(share.count));
      if (share.count > 0)
        m.push_bytes->Increment(4.0 * static_cast<double>(total));
      m.compute_seconds->Observe(compute_ms / 1e3);
      m.comm_wait_seconds->Observe(wait_ms / 1e3);
      m.step_seconds->Observe((compute_ms + wait_ms) / 1e3);
      m.loss->Set(loss_avg);
    }
    window_samples += share.count;
    progress.set_step(step + 1);
    progress.set_epoch(static_cast<int32_t>(epoch));
    progress.set_loss(loss_avg);
    progress.set_samples_total(progress.samples_total() + share.count);
    const auto now = std::chrono::steady_clock::now();
    const double secs =
        std::chrono::duration<double>(now - window_start).count();
    if (secs >= 0.5) {
      progress.set_samples_per_sec(window_samples / secs);
      window_start = now;
      window_samples = 0;
    }
    if (a.rank == 0 && !stopped && (step + 1) % spec.eval_every_steps() == 0) {
      const Evaluation e = evaluate(step + 1);
      stop_next =
          spec.target_accuracy() > 0 && e.accuracy >= spec.target_accuracy();
    }
    if (sink != nullptr) sink->Update(progress);
  }
  absl::Status closed = client.Close();
  if (!closed.ok()) return closed;
  if (a.rank == 0 && progress.evaluated_step() != progress.step())
    evaluate(progress.step());
  result.stopped_early = stopped;
  result.params = std::move(params);
  if (sink != nullptr) sink->Update(progress);
  return result;
}

}  // namespace fulcrum
