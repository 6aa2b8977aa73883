// libfulcrum (fulcrum.h) over the worker's C++ parts: CoordinatorLink,
// WorkerSession and the gRPC channel. No exception and no C++ type crosses
// the C boundary; statuses become codes and messages.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config/model_layout.h"
#include "common/metrics/http_server.h"
#include "common/metrics/metrics.h"
#include "common/net/allocator.h"
#include "common/net/transport.h"
#include "common/tensor/model_file.h"
#include "worker/capi/fulcrum.h"
#include "worker/capi/worker_handle.h"
#include "worker/coordinator_link.h"
#include "worker/grpc_channel.h"
#include "worker/worker_metrics.h"
#include "worker/worker_session.h"

namespace {

using fulcrum::capi::Fail;
using fulcrum::v1::JobSpec;


std::string Str(const char* s) { return s == nullptr ? "" : s; }

void Fill(const fulcrum::Assignment& a, int64_t first, fulcrum_assignment* out) {
  if (out == nullptr) return;
  const JobSpec& spec = a.spec;
  *out = fulcrum_assignment{};
  out->first_step = first;
  out->rank = a.rank;
  out->world_size = a.world_size;
  out->generation = a.generation;
  out->batch_size = spec.batch_size();
  out->epochs = spec.epochs();
  out->max_steps = spec.max_steps();
  out->seed = spec.seed();
  out->target_accuracy = spec.target_accuracy();
  out->chunk_sharding = spec.dataset().sharding() == "chunks";
  out->gradient_averaging = spec.optimizer().type() == "average";
}

fulcrum::v1::Progress ToProto(const fulcrum_progress& p) {
  fulcrum::v1::Progress out;
  out.set_step(p.step);
  out.set_epoch(p.epoch);
  out.set_loss(p.loss);
  out.set_samples_per_sec(p.samples_per_sec);
  out.set_test_accuracy(p.test_accuracy);
  out.set_evaluated_step(p.evaluated_step);
  out.set_samples_total(p.samples_total);
  return out;
}

// The job takes the worker in: an offer to prepare is answered at once (an
// external trainer has its data), then the assignment comes.
absl::StatusOr<fulcrum::Assignment> AwaitAssignment(fulcrum_worker* w,
                                                    absl::Time deadline) {
  for (;;) {
    std::optional<fulcrum::AgentState::Work> work =
        w->link->WaitForWork(deadline);
    if (!work.has_value()) {
      return absl::DeadlineExceededError(
          "the job did not take this worker in before the timeout");
    }
    if (work->kind == fulcrum::AgentState::Work::Kind::kEnded) {
      const fulcrum::v1::WorkerAssignment& a = work->assignment;
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", a.job_id(), " ended (",
          fulcrum::v1::JobState_Name(a.job_state()),
          ") before taking this worker in",
          a.job_message().empty() ? "" : ": ", a.job_message()));
    }
    if (work->kind == fulcrum::AgentState::Work::Kind::kPrepare) {
      w->link->Prepared(work->assignment.job_id(), absl::OkStatus());
      continue;
    }
    return fulcrum::FromProto(work->assignment);
  }
}

}  // namespace

extern "C" {

int fulcrum_api_version(void) { return FULCRUM_API_VERSION; }

int fulcrum_load_model(const char* path, float* out, int64_t count,
                       int64_t* version, fulcrum_error* error) {
  absl::StatusOr<fulcrum::ModelFile> model = fulcrum::ReadModelFile(Str(path));
  if (!model.ok()) return Fail(model.status(), error);
  const int64_t have = static_cast<int64_t>(model->params.size());
  if (have != count || (count > 0 && out == nullptr)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    Str(path), " holds ", have, " floats; the model has ",
                    count)),
                error);
  }
  std::copy(model->params.begin(), model->params.end(), out);
  if (version != nullptr) *version = model->version;
  return 0;
}

fulcrum_worker* fulcrum_connect(const fulcrum_options* options,
                                fulcrum_error* error) {
  if (options == nullptr || Str(options->coordinator).empty() ||
      Str(options->job_id).empty()) {
    Fail(absl::InvalidArgumentError(
             "options.coordinator and options.job_id must be set"),
         error);
    return nullptr;
  }
  // Keep gRPC's message buffers in the heap (common/net/allocator.h).
  fulcrum::TuneAllocatorInLibrary();
  absl::Status transport = fulcrum::UseTransport(
      {Str(options->tls_cert), Str(options->tls_key), Str(options->tls_ca)});
  if (!transport.ok()) {
    Fail(transport, error);
    return nullptr;
  }
  auto w = std::make_unique<fulcrum_worker>();
  w->job_id = options->job_id;
  w->metrics = std::make_unique<fulcrum::WorkerMetrics>(w->registry);
  w->job_metrics = w->metrics->ForJob(w->job_id);
  if (options->step_timeout_ms > 0)
    w->step_timeout = absl::Milliseconds(options->step_timeout_ms);
  if (options->rejoin_timeout_ms > 0)
    w->rejoin_timeout = absl::Milliseconds(options->rejoin_timeout_ms);
  w->link = std::make_unique<fulcrum::CoordinatorLink>(
      fulcrum::CoordinatorLink::Options{
          options->coordinator,
          Str(options->device).empty() ? "cpu" : options->device,
          options->job_id, "fulcrum.torch"});
  if (absl::Status s = w->link->Start(); !s.ok()) {
    Fail(s, error);
    return nullptr;
  }
  fulcrum_worker* raw = w.get();
  absl::StatusOr<std::unique_ptr<fulcrum::metrics::HttpServer>> server =
      fulcrum::metrics::ServeProcessMetrics(
          "worker",
          Str(options->metrics_address).empty() ? "127.0.0.1"
                                                : options->metrics_address,
          options->metrics_port, "", &w->registry,
          [raw] { return raw->joined.load(); });
  if (!server.ok()) {
    w->link->Shutdown();
    w->link->Leave();
    Fail(server.status(), error);
    return nullptr;
  }
  w->metrics_server = std::move(*server);
  return w.release();
}

int32_t fulcrum_metrics_port(const fulcrum_worker* w) {
  return w->metrics_server == nullptr ? -1 : w->metrics_server->port();
}

void fulcrum_close(fulcrum_worker* w) {
  if (w == nullptr) return;
  if (w->session != nullptr) w->session->Close().IgnoreError();
  w->session.reset();
  w->link->Shutdown();
  w->link->Leave();
  delete w;
}

int fulcrum_declare(fulcrum_worker* w, int32_t count, const char* const* names,
                    const int64_t* const* shapes, const int32_t* ndims,
                    const int32_t* buffers, fulcrum_error* error) {
  fulcrum::v1::DeclareModelRequest request;
  request.set_worker_id(w->link->worker_id());
  request.set_job_id(w->job_id);
  for (int32_t i = 0; i < count; ++i) {
    fulcrum::v1::TensorSpec* t = request.add_tensors();
    t->set_name(Str(names[i]));
    for (int32_t d = 0; d < ndims[i]; ++d) t->add_shape(shapes[i][d]);
    t->set_buffer(buffers != nullptr && buffers[i] != 0);
  }
  absl::StatusOr<fulcrum::v1::DeclareModelResponse> r =
      w->link->DeclareModel(request);
  if (!r.ok()) return Fail(r.status(), error);
  absl::StatusOr<fulcrum::ParameterLayout> layout =
      fulcrum::LayoutForSpec(r->spec());
  if (!layout.ok()) return Fail(layout.status(), error);
  w->layout = std::move(*layout);
  return 0;
}

int64_t fulcrum_num_elements(const fulcrum_worker* w) {
  return w->layout.has_value() ? w->layout->total_size() : 0;
}

int32_t fulcrum_num_partitions(const fulcrum_worker* w) {
  return w->layout.has_value()
             ? static_cast<int32_t>(w->layout->partitions().size())
             : 0;
}

void fulcrum_partition(const fulcrum_worker* w, int32_t id, int64_t* offset,
                       int64_t* size) {
  const fulcrum::Partition& p = w->layout->partitions()[id];
  *offset = p.offset;
  *size = p.size;
}

int fulcrum_join(fulcrum_worker* w, float* params, int64_t timeout_ms,
                 fulcrum_assignment* out, fulcrum_error* error) {
  if (!w->layout.has_value())
    return Fail(absl::FailedPreconditionError("declare the model first"),
                error);
  if (params == nullptr || (w->params != nullptr && w->params != params)) {
    return Fail(absl::InvalidArgumentError(
                    "params must be the same non-null buffer at every join"),
                error);
  }
  w->params = params;
  absl::StatusOr<fulcrum::Assignment> a =
      AwaitAssignment(w, absl::Now() + absl::Milliseconds(timeout_ms));
  if (!a.ok()) return Fail(a.status(), error);
  fulcrum::WorkerSession::Options o;
  o.worker_id = w->link->worker_id();
  o.step_timeout = w->step_timeout;
  o.rejoin_timeout = w->rejoin_timeout;
  fulcrum::metrics::Counter* reconnects = w->job_metrics.reconnects;
  o.on_reconnect = [reconnects] { reconnects->Increment(); };
  fulcrum::metrics::Counter* waited = w->job_metrics.lease_wait_seconds;
  o.on_coordinator_wait = [waited](absl::Duration d) {
    waited->Increment(absl::ToDoubleSeconds(d));
  };
  w->session = std::make_unique<fulcrum::WorkerSession>(
      o, *a, &*w->layout, w->params, &w->channels, w->link.get());
  absl::StatusOr<int64_t> first = w->session->Join();
  if (!first.ok()) return Fail(first.status(), error);
  w->joined = true;
  Fill(*a, *first, out);
  return 0;
}

int fulcrum_rejoin(fulcrum_worker* w, int code, fulcrum_assignment* out,
                   fulcrum_error* error) {
  if (w->session == nullptr)
    return Fail(absl::FailedPreconditionError("join first"), error);
  absl::Status why(static_cast<absl::StatusCode>(code), "the generation ended");
  w->job_metrics.rejoins->Increment();
  w->step_start = absl::InfinitePast();
  if (absl::Status s = w->session->NextGeneration(why); !s.ok())
    return Fail(s, error);
  absl::StatusOr<int64_t> first = w->session->Join();
  if (!first.ok()) return Fail(first.status(), error);
  Fill(w->session->assignment(), *first, out);
  return 0;
}

int fulcrum_push(fulcrum_worker* w, int32_t id, int64_t step, int64_t samples,
                 const float* grads, int32_t stop, int64_t chunk,
                 int64_t begin, int64_t end, fulcrum_error* error) {
  if (w->session == nullptr)
    return Fail(absl::FailedPreconditionError("join first"), error);
  if (id < 0 || id >= fulcrum_num_partitions(w) || samples < 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "push of partition ", id, " with ", samples, " samples")),
                error);
  }
  w->session->Push(id, step, samples, grads, stop != 0,
                   fulcrum::PushRange{chunk, begin, end});
  if (samples > 0) {
    // As they travel (wire.gradients).
    w->job_metrics.push_bytes->Increment(
        fulcrum::ElementBytes(w->session->gradient_encoding()) *
        static_cast<double>(w->layout->partitions()[id].size));
  }
  return 0;
}

int fulcrum_wait(fulcrum_worker* w, int64_t clock, fulcrum_arrived_fn arrived,
                 void* context, int32_t* stop, fulcrum_error* error) {
  if (w->session == nullptr)
    return Fail(absl::FailedPreconditionError("join first"), error);
  bool stopped = false;
  const absl::Time waited = absl::Now();
  absl::Status s = w->session->WaitForParameters(clock, &stopped, [&](int32_t id) {
    if (arrived != nullptr) arrived(context, id);
  });
  const absl::Time now = absl::Now();
  if (s.ok()) {  // a step: from the last wait's end (compute) through this one
    const double wait = absl::ToDoubleSeconds(now - waited);
    w->job_metrics.steps->Increment();
    w->job_metrics.comm_wait_seconds->Observe(wait);
    if (w->step_start != absl::InfinitePast()) {
      const double step = absl::ToDoubleSeconds(now - w->step_start);
      w->job_metrics.step_seconds->Observe(step);
      w->job_metrics.compute_seconds->Observe(step - wait);
    }
  }
  w->step_start = now;
  if (stop != nullptr) *stop = stopped;
  return s.ok() ? 0 : Fail(s, error);
}

int fulcrum_lease_chunk(fulcrum_worker* w, const int64_t* done,
                        int32_t done_count, const int64_t* in_flight,
                        int32_t in_flight_count, int64_t dataset_size,
                        fulcrum_lease* out, fulcrum_error* error) {
  if (w->session == nullptr)
    return Fail(absl::FailedPreconditionError("join first"), error);
  bool exhausted = false;
  absl::StatusOr<std::optional<fulcrum::ChunkLease>> got =
      w->session->LeaseChunk(
          std::vector<int64_t>(done, done + done_count), dataset_size,
          &exhausted,
          std::vector<int64_t>(in_flight, in_flight + in_flight_count));
  if (!got.ok()) return Fail(got.status(), error);
  *out = fulcrum_lease{-1, 0, 0, 0, exhausted ? 1 : 0};
  if (got->has_value()) {
    out->chunk = (*got)->chunk;
    out->epoch = static_cast<int32_t>((*got)->epoch);
    out->begin = (*got)->next;
    out->end = (*got)->end;
  }
  return 0;
}

void fulcrum_report(fulcrum_worker* w, const fulcrum_progress* progress) {
  if (progress == nullptr) return;
  w->link->Update(ToProto(*progress));
  const fulcrum::WorkerMetrics::Job& m = w->job_metrics;
  if (progress->samples_total > w->samples_reported) {
    m.samples->Increment(
        static_cast<double>(progress->samples_total - w->samples_reported));
    w->samples_reported = progress->samples_total;
  }
  m.loss->Set(progress->loss);
  if (progress->evaluated_step > 0) m.test_accuracy->Set(progress->test_accuracy);
}

int fulcrum_leaving(fulcrum_worker* w) { return w->link->Leaving() ? 1 : 0; }

int fulcrum_finish(fulcrum_worker* w, const fulcrum_progress* progress,
                   const char* error_message, fulcrum_error* error) {
  // The channel's own error (the one the step failed with) is not news.
  w->joined = false;
  if (w->session != nullptr) w->session->Close().IgnoreError();
  w->session.reset();
  const fulcrum::v1::Progress p =
      progress != nullptr ? ToProto(*progress) : w->link->LastProgress();
  if (!w->link->Leaving()) w->link->Report(p, Str(error_message));
  w->link->Finished();
  (void)error;
  return 0;
}

}  // extern "C"
