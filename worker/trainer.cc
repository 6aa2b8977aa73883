#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "common/tensor/layout.h"
#include "worker/data/sampler.h"
#include "worker/model/mlp.h"
#include "worker/ps_client.h"

namespace fulcrum {
namespace {

using Clock = std::chrono::steady_clock;

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

absl::Status Trainer::Prepare(const v1::JobSpec& spec) {
  return LoadTrain(spec).status();
}

absl::StatusOr<const LabeledImages*> Trainer::LoadTrain(
    const v1::JobSpec& spec) {
  if (spec.model().layers_size() < 2) {
    return absl::InvalidArgumentError("model.layers needs at least 2 sizes");
  }
  const int inputs = spec.model().layers(0);
  const int classes = spec.model().layers(spec.model().layers_size() - 1);
  ASSIGN_OR_RETURN(const LabeledImages* train,
                   Load(spec.dataset(), true, classes));
  if (train->images.rows * train->images.cols != inputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[0] is ", inputs, " but the images have ",
        train->images.rows * train->images.cols, " pixels"));
  }
  return train;
}

absl::StatusOr<TrainResult> Trainer::Run(const Assignment& first,
                                         ProgressSink* sink) {
  const v1::JobSpec& spec = first.spec;
  const std::vector<int> sizes(spec.model().layers().begin(),
                               spec.model().layers().end());
  ASSIGN_OR_RETURN(
      ParameterLayout layout,
      ParameterLayout::ForMlp(sizes, spec.shards(), spec.partition_bytes()));
  // Loaded already when this worker prepared to join.
  ASSIGN_OR_RETURN(const LabeledImages* train, LoadTrain(spec));
  const bool chunked = spec.dataset().sharding() == "chunks";
  if (chunked && sink == nullptr) {
    return absl::FailedPreconditionError(
        "dataset.sharding 'chunks' needs a coordinator to lease chunks from; "
        "use 'static'");
  }
  const LabeledImages* test = nullptr;
  const BatchGatherer gather(train->images);
  const int batch = spec.batch_size();
  const int64_t pixels = sizes.front();
  const int64_t total = layout.total_size();

  // Everything the step loop touches is allocated here, once. The host
  // buffers the data plane reads and writes are page-locked for a GPU.
  std::vector<float> params(total), grads(total);
  backend_->RegisterHost(params.data(), total);
  backend_->RegisterHost(grads.data(), total);
  struct Unregister {
    Backend* b;
    float* p;
    float* g;
    ~Unregister() {
      b->UnregisterHost(p);
      b->UnregisterHost(g);
    }
  } unregister{backend_, params.data(), grads.data()};
  DeviceBuffer params_dev(backend_, params.data(), total);
  DeviceBuffer grads_dev(backend_, grads.data(), total);
  const int eval_batch = std::max(batch, options_.eval_batch);
  std::vector<float> x_host(static_cast<int64_t>(eval_batch) * pixels);
  std::vector<int32_t> y(eval_batch);
  DeviceBuffer x_dev(backend_, x_host.data(),
                     static_cast<int64_t>(eval_batch) * pixels);
  Mlp mlp(backend_, layout, batch);
  std::unique_ptr<Mlp> eval_mlp;
  std::vector<int64_t> order;
  order.reserve(train->images.count);
  // GPU: gradient copies in flight during backward (ticket, partitions).
  struct PendingCopy {
    int ticket;
    int64_t first, last;  // partition ids, first >= last
  };
  std::vector<PendingCopy> pending;
  pending.reserve(layout.partitions().size());

  const int64_t n = train->images.count;
  // Partitions in the order backward completes them (last layer first).
  const std::vector<Partition>& parts = layout.partitions();
  // Host memory is the backend's: no staging copies at all.
  const bool host = backend_->HostAccessible();
  TrainResult result;
  v1::Progress& progress = result.progress;
  std::mt19937_64 delay_rng(options_.delay_seed);
  WorkerMetrics::Job m{};
  if (options_.metrics != nullptr) m = options_.metrics->ForJob(first.job_id);
  int64_t epoch_loaded = -1;
  bool stop_next = false, stopped = false;
  double loss_avg = 0;
  auto window_start = std::chrono::steady_clock::now();
  int64_t window_samples = 0;
  // Rank 0 evaluates; whoever becomes rank 0 loads the test set then.
  auto load_test = [&]() -> absl::Status {
    if (test != nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(test, Load(spec.dataset(), false, sizes.back()));
    eval_mlp = std::make_unique<Mlp>(backend_, layout, eval_batch);
    return absl::OkStatus();
  };
  auto evaluate = [&](int64_t at_step) {
    Evaluation e = Evaluate(backend_, *eval_mlp, params_dev.get(), *test,
                            gather, eval_batch, x_host, y, x_dev.get());
    progress.set_test_accuracy(e.accuracy);
    progress.set_evaluated_step(at_step);
    if (m.test_accuracy != nullptr) m.test_accuracy->Set(e.accuracy);
    return e;
  };

  // Chunk sharding: the lease this worker trains from (leases end with
  // their generation), chunks finished since the last lease call.
  struct Lease {
    int64_t chunk = -1, epoch = 0, next = 0, end = 0;
  } lease;
  std::vector<int64_t> done_chunks;
  bool exhausted = false;
  absl::Time next_poll = absl::InfinitePast();
  bool first_step = true;

  Assignment a = first;
  // One generation: connect, train until the end, a stop or an error.
  auto run_generation = [&]() -> absl::Status {
    if (a.rank == 0) RETURN_IF_ERROR(load_test());
    PsClient::Options ps;
    ps.job_id = a.job_id;
    ps.worker_id = options_.worker_id;
    ps.generation = a.generation;
    ps.shard_addresses = a.shard_addresses;
    ps.chunk_bytes = spec.chunk_bytes();
    ps.reconnect_timeout = options_.reconnect_timeout;
    if (m.reconnects != nullptr) {
      metrics::Counter* reconnects = m.reconnects;
      ps.on_reconnect = [reconnects] { reconnects->Increment(); };
    }
    // Copies of an ended generation land before its successor's arrive.
    backend_->Synchronize();
    PsClient client(ps, &layout, params.data());
    ASSIGN_OR_RETURN(int64_t version, client.Connect());
    std::cerr << "fulcrum-worker: " << a.job_id << " generation " << a.generation
              << ": rank " << a.rank << " of " << a.world_size
              << ", first step " << version << "\n";
    backend_->CopyToDevice(params.data(), params_dev.get(), total);

    const int64_t per_epoch = StepsPerEpoch(n, a.world_size, batch);
    int64_t last_step = per_epoch * spec.epochs();
    if (spec.max_steps() > 0) last_step = std::min(last_step, spec.max_steps());
    progress.set_total_steps(last_step);
    // Chunk sharding runs until the data is exhausted (or max_steps).
    const int64_t step_limit = chunked ? (spec.max_steps() > 0 ? spec.max_steps()
                                                               : INT64_MAX)
                                       : last_step;
    for (int64_t step = version; step < step_limit && !stopped; ++step) {
      const auto step_start = std::chrono::steady_clock::now();
      Clock::time_point first_push;
      Share share;
      PsClient::Range range;
      int64_t epoch = step / per_epoch;
      if (chunked) {
        if (lease.chunk < 0 && !exhausted && absl::Now() >= next_poll) {
          v1::LeaseChunkRequest request;
          request.set_worker_id(options_.worker_id);
          request.set_job_id(a.job_id);
          request.set_generation(a.generation);
          request.set_dataset_size(n);
          for (int64_t id : done_chunks) request.add_done(id);
          absl::StatusOr<v1::LeaseChunkResponse> got =
              sink->LeaseChunk(request);
          if (got.ok()) {
            done_chunks.clear();
            exhausted = got->exhausted();
            if (got->has_chunk()) {
              lease = {got->chunk().chunk(), got->epoch(), got->chunk().begin(),
                       got->chunk().end()};
            } else {
              // Others still train the last chunks (one may come back).
              next_poll = absl::Now() + absl::Milliseconds(20);
            }
          } else if (got.status().code() == absl::StatusCode::kAborted) {
            return got.status();  // the generation ended
          } else if (got.status().code() != absl::StatusCode::kUnavailable &&
                     got.status().code() !=
                         absl::StatusCode::kDeadlineExceeded) {
            return got.status();
          }  // coordinator unreachable: an empty step, then ask again
        }
        if (lease.chunk >= 0) {
          if (lease.epoch != epoch_loaded) {
            EpochOrder(spec.seed(), lease.epoch, n, &order);
            epoch_loaded = lease.epoch;
          }
          share.begin = lease.next;
          share.count = std::min<int64_t>(batch, lease.end - lease.next);
          range = {lease.chunk, lease.next, lease.next + share.count};
          lease.next += share.count;
          if (lease.next >= lease.end) {
            done_chunks.push_back(lease.chunk);
            lease = Lease{};
          }
        }
        epoch = epoch_loaded < 0 ? 0 : epoch_loaded;
      } else {
        if (epoch != epoch_loaded) {
          EpochOrder(spec.seed(), epoch, n, &order);
          epoch_loaded = epoch;
        }
        share = WorkerShare(n, step % per_epoch, a.rank, a.world_size, batch);
      }
      // This worker leaves (shutdown, or the job was cancelled): it stops
      // alone; the coordinator takes it out of the next generation.
      if (sink != nullptr && sink->Cancelled()) {
        client.Cancel();
        client.Close().IgnoreError();
        return absl::CancelledError("worker leaving the job");
      }
      const bool stop = stop_next || (chunked && exhausted);
      if (share.count > 0) {
        gather.Gather(train->images, train->labels, order.data() + share.begin,
                      share.count, x_host.data(), y.data());
        backend_->CopyToDevice(x_host.data(), x_dev.get(),
                               share.count * pixels);
        int next = static_cast<int>(parts.size()) - 1;  // next to push
        const double loss = mlp.ForwardBackward(
            params_dev.get(), x_dev.get(), y.data(),
            static_cast<int>(share.count), grads_dev.get(),
            [&](int64_t ready_from) {
              const int64_t first_id = next;
              while (next >= 0 && parts[next].offset >= ready_from) --next;
              if (next == first_id) return;
              const Partition& lo = parts[next + 1];
              const Partition& hi = parts[first_id];
              if (!host) {
                // GPU: copy this bucket on the copy stream while backward
                // goes on with earlier layers; push once it has arrived.
                pending.push_back(
                    {backend_->CopyToHostAsync(grads_dev.get() + lo.offset,
                                               grads.data() + lo.offset,
                                               hi.offset + hi.size - lo.offset),
                     first_id, next + 1});
                return;
              }
              if (first_push == Clock::time_point()) first_push = Clock::now();
              for (int64_t id = first_id; id > next; --id) {
                client.Push(static_cast<int32_t>(id), step, share.count,
                            grads.data(), stop, range);
              }
            });
        for (const PendingCopy& c : pending) {  // in backward's order
          backend_->WaitCopy(c.ticket);
          if (first_push == Clock::time_point()) first_push = Clock::now();
          for (int64_t id = c.first; id >= c.last; --id) {
            client.Push(static_cast<int32_t>(id), step, share.count,
                        grads.data(), stop, range);
          }
        }
        pending.clear();
        RETURN_IF_ERROR(backend_->status());
        loss_avg = first_step ? loss : 0.95 * loss_avg + 0.05 * loss;
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
        delay +=
            absl::FromChrono(std::chrono::steady_clock::now() - step_start) *
            (options_.slowdown - 1.0);
      }
      if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
      const auto computed = std::chrono::steady_clock::now();
      bool stop_seen = false;
      // GPU: each partition goes to the device as soon as it arrives,
      // while the others are still on the wire.
      RETURN_IF_ERROR(client.WaitForClock(
          step + 1, absl::Now() + options_.step_timeout, &stop_seen,
          [&](int32_t id) {
            if (host) return;
            const Partition& p = parts[id];
            backend_->CopyToDeviceAsync(params.data() + p.offset,
                                        params_dev.get() + p.offset, p.size);
          }));
      const auto received = std::chrono::steady_clock::now();
      const double compute_ms =
          std::chrono::duration<double, std::milli>(computed - step_start)
              .count();
      const double wait_ms =
          std::chrono::duration<double, std::milli>(received - computed)
              .count();
      const double keep = first_step ? 0.0 : 0.95;
      progress.set_step_compute_ms(keep * progress.step_compute_ms() +
                                   (1 - keep) * compute_ms);
      progress.set_step_wait_ms(keep * progress.step_wait_ms() +
                                (1 - keep) * wait_ms);
      // Overlap: the share of the communication (first push to the new
      // parameters) that happened while this worker was still computing.
      if (first_push != Clock::time_point()) {
        const double comm_ms =
            std::chrono::duration<double, std::milli>(received - first_push)
                .count();
        const double overlap =
            comm_ms > 0 ? std::clamp(1.0 - wait_ms / comm_ms, 0.0, 1.0) : 0.0;
        progress.set_overlap(keep * progress.overlap() + (1 - keep) * overlap);
        if (m.overlap != nullptr) m.overlap->Set(progress.overlap());
      }
      first_step = false;
      // The next step's kernels start once the parameters have landed.
      backend_->ComputeWaitsForCopies();
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
      if (a.rank == 0 && !stopped &&
          (step + 1) % spec.eval_every_steps() == 0) {
        const Evaluation e = evaluate(step + 1);
        stop_next =
            spec.target_accuracy() > 0 && e.accuracy >= spec.target_accuracy();
      }
      if (sink != nullptr) sink->Update(progress);
    }
    absl::Status closed = client.Close();
    // Once the job stopped, a stream ending badly afterwards changes nothing.
    if (!closed.ok() && !stopped) return closed;
    return absl::OkStatus();
  };

  for (;;) {
    absl::Status s = run_generation();
    if (s.ok()) break;
    const bool rejoin = s.code() == absl::StatusCode::kAborted ||
                        s.code() == absl::StatusCode::kUnavailable;
    if (!rejoin || sink == nullptr || sink->Cancelled()) return s;
    std::optional<Assignment> next = sink->NextAssignment(
        a.job_id, a.generation, absl::Now() + options_.rejoin_timeout);
    if (!next.has_value()) {
      if (sink->Cancelled()) return absl::CancelledError("job cancelled");
      return absl::Status(s.code(),
                          absl::StrCat(s.message(), " (and no newer generation of ",
                                       a.job_id, " came)"));
    }
    // A new generation: leases, half-done steps and pending stops belong
    // to the old one; the shards say where to resume.
    a = std::move(*next);
    if (m.rejoins != nullptr) m.rejoins->Increment();
    lease = Lease{};
    done_chunks.clear();
    exhausted = false;
    stop_next = false;
    next_poll = absl::InfinitePast();
  }
  if (a.rank == 0 && progress.evaluated_step() != progress.step()) {
    RETURN_IF_ERROR(load_test());
    evaluate(progress.step());
  }
  result.stopped_early = stopped;
  result.params = std::move(params);
  if (sink != nullptr) sink->Update(progress);
  return result;
}

}  // namespace fulcrum
