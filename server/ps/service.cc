#include "server/ps/service.h"

#include <algorithm>
#include <functional>
#include <iostream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

// Sends every chunk of `partition` (current values) through `write`, reusing
// `params` (and its buffer) across chunks.
// `clock` < 0: answer with the partition's version (sync).
template <typename WriteFn>
absl::Status SendPartition(JobShard& job, int32_t partition, int64_t clock,
                           v1::Params* params, WriteFn write) {
  const int64_t size = job.PartitionSize(partition);
  for (int64_t offset = 0; offset < size; offset += job.chunk_elems()) {
    const int64_t n = std::min(job.chunk_elems(), size - offset);
    std::string* data = params->mutable_data();
    data->resize(n * sizeof(float));
    int64_t version;
    bool stop;
    absl::Status s =
        job.Read(partition, offset, n, reinterpret_cast<float*>(data->data()),
                 &version, &stop);
    if (!s.ok()) return s;
    params->set_partition(partition);
    params->set_offset(offset);
    params->set_version(version);
    params->set_clock(clock < 0 ? version : clock);
    params->set_stop(stop);
    params->set_encoding(v1::ENCODING_FP32);
    if (!write(*params))
      return absl::UnavailableError("peer closed the stream");
  }
  return absl::OkStatus();
}

// Answers a worker's read at clock c. sync: each partition as soon as its
// version c exists (in the order the worker completed them), so the worker
// starts applying while the shard still aggregates. ssp/async: once the
// ClockTable's bound allows, every partition at its current values.
template <typename WriteFn>
absl::Status AnswerRead(JobShard& job, int64_t c, int64_t generation,
                        const std::vector<int32_t>& completed,
                        absl::Time deadline,
                        const std::function<bool()>& cancelled,
                        const ShardMetrics::Job& m, v1::Params* params,
                        WriteFn write) {
  absl::Duration waited;
  auto timed = [&waited](auto wait) {
    const absl::Time start = absl::Now();
    auto result = wait();
    waited += absl::Now() - start;
    return result;
  };
  if (job.mode() == JobShard::Mode::kSync) {
    for (int32_t id : completed) {
      RETURN_IF_ERROR(timed(
          [&] { return job.WaitForVersion(id, c, generation, deadline, cancelled); }));
      RETURN_IF_ERROR(SendPartition(job, id, c, params, write));
    }
  }
  ASSIGN_OR_RETURN(const int64_t staleness, timed([&] {
                     return job.clocks().WaitForRead(c, job.read_bound(),
                                                     deadline, cancelled,
                                                     generation);
                   }));
  m.barrier_wait_seconds->Observe(absl::ToDoubleSeconds(waited));
  m.staleness->Observe(static_cast<double>(staleness));
  if (job.mode() == JobShard::Mode::kSync) return absl::OkStatus();
  for (int32_t id : job.partition_ids()) {
    RETURN_IF_ERROR(SendPartition(job, id, c, params, write));
  }
  return absl::OkStatus();
}

}  // namespace

ParameterServerService::ParameterServerService(ParameterShard* shard,
                                               Options options)
    : shard_(shard), options_(options), metrics_(options.metrics) {
  if (metrics_ == nullptr) {
    own_registry_ = std::make_unique<metrics::Registry>();
    own_metrics_ = std::make_unique<ShardMetrics>(*own_registry_);
    metrics_ = own_metrics_.get();
  }
}

grpc::Status ParameterServerService::InitJob(grpc::ServerContext*,
                                             const v1::InitJobRequest* request,
                                             v1::InitJobResponse* response) {
  JobInit init;
  init.job_id = request->job_id();
  init.spec = request->spec();
  init.shard_index = request->shard_index();
  init.num_shards = request->num_shards();
  init.generation = request->generation();
  init.workers.assign(request->workers().begin(), request->workers().end());
  if (init.spec.checkpoint().every_steps() > 0) {
    ShardMetrics* m = metrics_;
    const std::string job_id = init.job_id;
    init.on_checkpoint = [m, job_id](int64_t step, double seconds,
                                     const absl::Status& s) {
      m->CheckpointWritten(job_id, step, seconds, s.ok());
      if (!s.ok())
        std::cerr << "fulcrum-server: checkpoint failed: " << s << "\n";
    };
  }
  absl::StatusOr<std::shared_ptr<JobShard>> job = shard_->InitJob(init);
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (init.spec.checkpoint().every_steps() > 0)
    metrics_->CheckpointsEnabled(init.job_id);
  for (int32_t id : (*job)->partition_ids()) response->add_partitions(id);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::EndJob(grpc::ServerContext*,
                                            const v1::EndJobRequest* request,
                                            v1::EndJobResponse*) {
  shard_->EndJob(request->job_id());
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Stream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::StreamResponse, v1::StreamRequest>* stream) {
  absl::Status s = ServeStream(context, stream);
  if (!s.ok() && s.code() != absl::StatusCode::kCancelled) {
    metrics_->Rejected(
        absl::AsciiStrToLower(absl::StatusCodeToString(s.code())));
  }
  return ToGrpcStatus(s);
}

absl::Status ParameterServerService::ServeStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::StreamResponse, v1::StreamRequest>* stream) {
  v1::StreamRequest request;
  if (!stream->Read(&request)) return absl::OkStatus();
  if (!request.has_hello()) {
    return absl::FailedPreconditionError(
        "the first message of a stream must be hello");
  }
  const v1::Hello& hello = request.hello();
  absl::StatusOr<std::shared_ptr<JobShard>> found =
      shard_->Find(hello.job_id());
  if (!found.ok()) return found.status();
  JobShard& job = **found;
  if (job.ended()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", hello.job_id(), " has ended"));
  }
  absl::StatusOr<int> member =
      job.MemberIndex(hello.worker_id(), hello.generation());
  if (!member.ok()) return member.status();
  const int64_t generation = hello.generation();
  const ShardMetrics::Job m = metrics_->ForJob(hello.job_id());

  // In ssp/async a worker whose stream ends has stopped training: nobody
  // waits for its clock any more.
  absl::Cleanup finished = [&job, m = *member, generation] {
    if (job.mode() != JobShard::Mode::kSync)
      job.clocks().Finish(m, generation);
  };
  v1::StreamResponse response;
  auto write = [&](const v1::Params& p) {
    m.pull_bytes->Increment(static_cast<double>(p.data().size()));
    return stream->Write(response);
  };
  const int64_t start_clock =
      job.mode() == JobShard::Mode::kSync ? -1 : job.clocks().Clock(*member);
  for (int32_t id : job.partition_ids()) {
    RETURN_IF_ERROR(
        SendPartition(job, id, start_clock, response.mutable_params(), write));
  }
  // Partitions this worker completed for the current step, in completion
  // order (a partition completed earlier on a broken stream counts too).
  std::vector<int32_t> completed;
  completed.reserve(job.partition_ids().size());
  int64_t completing_step = -1;
  auto cancelled = [context] { return context->IsCancelled(); };
  while (stream->Read(&request)) {
    if (!request.has_push()) {
      return absl::InvalidArgumentError(
          "hello may only be the first message of a stream");
    }
    const v1::Push& push = request.push();
    PushChunk chunk;
    chunk.step = push.step();
    chunk.partition = push.partition();
    chunk.offset = push.offset();
    chunk.samples = push.samples();
    chunk.data = push.data().data();
    chunk.bytes = push.data().size();
    chunk.stop = push.stop();
    chunk.generation = generation;
    if (push.has_range()) {
      if (push.range().chunk() < 0 || push.range().end() < push.range().begin()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "push.range must have chunk >= 0 and end >= begin, got chunk ",
            push.range().chunk(), " [", push.range().begin(), ", ",
            push.range().end(), ")"));
      }
      chunk.range_chunk = push.range().chunk();
      chunk.range_begin = push.range().begin();
      chunk.range_end = push.range().end();
    }
    if (push.encoding() != v1::ENCODING_FP32 &&
        push.encoding() != v1::ENCODING_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("push.encoding ", push.encoding(), " is not supported"));
    }
    m.push_bytes->Increment(static_cast<double>(chunk.bytes));
    const absl::Time push_start = absl::Now();
    absl::StatusOr<PushOutcome> outcome = job.Push(*member, chunk);
    m.aggregate_seconds->Observe(
        absl::ToDoubleSeconds(absl::Now() - push_start));
    if (!outcome.ok()) return outcome.status();
    if (*outcome == PushOutcome::kPartial) continue;
    if (chunk.step != completing_step) {
      completed.clear();
      completing_step = chunk.step;
    }
    if (std::find(completed.begin(), completed.end(), chunk.partition) !=
        completed.end())
      continue;  // a repeat on this stream
    completed.push_back(chunk.partition);
    if (completed.size() < job.partition_ids().size()) continue;
    // This worker pushed its whole share of step t: answer its read at t+1.
    RETURN_IF_ERROR(AnswerRead(job, chunk.step + 1, generation, completed,
                               absl::Now() + options_.step_timeout, cancelled,
                               m, response.mutable_params(), write));
    completed.clear();
  }
  return absl::OkStatus();
}

grpc::Status ParameterServerService::Reconfigure(
    grpc::ServerContext*, const v1::ReconfigureRequest* request,
    v1::ReconfigureResponse* response) {
  absl::StatusOr<std::shared_ptr<JobShard>> found =
      shard_->Find(request->job_id());
  if (!found.ok()) return ToGrpcStatus(found.status());
  const std::vector<std::string> workers(request->workers().begin(),
                                         request->workers().end());
  absl::StatusOr<Reconfigured> done = (*found)->Reconfigure(
      request->generation(), workers, request->align_version(),
      request->restore(), request->restore_step());
  if (!done.ok()) return ToGrpcStatus(done.status());
  std::cerr << "fulcrum-server: job " << request->job_id() << " generation "
            << request->generation()
            << (request->align_version() < 0
                    ? absl::StrCat(" adopted", request->restore()
                                                   ? absl::StrCat(" (restored step ", request->restore_step(), ")")
                                                   : "")
                    : absl::StrCat(" aligned at version ", request->align_version()))
            << "\n";
  response->set_min_version(done->min_version);
  response->set_max_version(done->max_version);
  response->set_has_ledger(done->has_ledger);
  for (int64_t step : (*found)->CheckpointSteps())
    response->add_checkpoint_steps(step);
  for (const auto& [chunk, e] : done->ledger) {
    v1::LedgerEntry* r = response->add_ledger();
    r->set_chunk(chunk);
    r->set_end(e.end);
    r->set_samples(e.samples);
  }
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Pull(
    grpc::ServerContext*, const v1::PullRequest* request,
    grpc::ServerWriter<v1::Params>* writer) {
  absl::StatusOr<std::shared_ptr<JobShard>> found =
      shard_->Find(request->job_id());
  if (!found.ok()) return ToGrpcStatus(found.status());
  JobShard& job = **found;
  std::vector<int32_t> ids(request->partitions().begin(),
                           request->partitions().end());
  if (ids.empty()) ids = job.partition_ids();
  for (int32_t id : ids) {
    if (job.PartitionSize(id) < 0) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("partitions: ", id, " is not held by this shard"));
    }
  }
  v1::Params params;
  metrics::Counter& pulled = *metrics_->ForJob(request->job_id()).pull_bytes;
  auto write = [writer, &pulled](const v1::Params& p) {
    pulled.Increment(static_cast<double>(p.data().size()));
    return writer->Write(p);
  };
  for (int32_t id : ids) {
    absl::Status s = SendPartition(job, id, -1, &params, write);
    if (!s.ok()) return ToGrpcStatus(s);
  }
  return grpc::Status::OK;
}

}  // namespace fulcrum
