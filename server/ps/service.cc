#include "server/ps/service.h"

#include <iostream>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/dataplane/shm_ring.h"
#include "common/dataplane/shm_segment.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"
#include "server/ps/stream_frames.h"
#include "server/ps/stream_reactor.h"
#include "server/ps/worker_stream.h"

namespace fulcrum {
namespace {

// Params messages written to a gRPC stream, one reused message.
template <typename Writer, typename Message>
class GrpcParamsWriter : public ParamsWriter {
 public:
  GrpcParamsWriter(Writer* writer, Message* message, v1::Params* params)
      : writer_(writer), message_(message), params_(params) {}
  // Pull's values: fp32.
  ParamsRoom Reserve(int32_t, int64_t, int64_t count,
                     WireEncoding) override {
    std::string* data = params_->mutable_data();
    data->resize(count * sizeof(float));
    return {data->data(), WireEncoding::kFp32};
  }
  bool Send(const ParamsHeader& h) override {
    params_->set_partition(h.partition);
    params_->set_offset(h.offset);
    params_->set_version(h.version);
    params_->set_clock(h.clock);
    params_->set_stop(h.stop);
    params_->set_encoding(v1::ENCODING_FP32);
    return writer_->Write(*message_);
  }

 private:
  Writer* const writer_;
  Message* const message_;
  v1::Params* const params_;
};

}  // namespace

ParameterServerService::ParameterServerService(ParameterShard* shard,
                                               Options options)
    : shard_(shard), options_(options), metrics_(options.metrics) {
  // Stream reads and writes frames (payloads out of line) instead of the
  // generated protobuf types; the bytes on the wire are the same.
  const int stream_method = v1::Push::descriptor()
                                ->file()
                                ->FindServiceByName("ParameterServer")
                                ->FindMethodByName("Stream")
                                ->index();
  if (options_.callback_streams) {
    MarkMethodCallback(
        stream_method,
        new grpc::internal::CallbackBidiHandler<RequestFrame, ResponseFrame>(
            [this](grpc::CallbackServerContext* context) {
              return new StreamReactor(this, context);
            }));
  } else {
    MarkMethodStreamed(
        stream_method,
        new grpc::internal::BidiStreamingHandler<ParameterServerService,
                                                 RequestFrame, ResponseFrame>(
            [](ParameterServerService* service, grpc::ServerContext* context,
               grpc::ServerReaderWriter<ResponseFrame, RequestFrame>* stream) {
              return service->StreamFrames(context, stream);
            },
            this));
  }
  if (metrics_ == nullptr) {
    own_registry_ = std::make_unique<metrics::Registry>();
    own_metrics_ = std::make_unique<ShardMetrics>(*own_registry_);
    metrics_ = own_metrics_.get();
  }
}

ParameterServerService::~ParameterServerService() {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (reactors_.load() > 0 && absl::Now() < until)
    absl::SleepFor(absl::Milliseconds(1));
  if (reactors_.load() > 0) {
    std::cerr << "fulcrum-server: " << reactors_.load()
              << " callback streams still alive at the service's end\n";
  }
}

grpc::Status ParameterServerService::InitJob(grpc::ServerContext* context,
                                             const v1::InitJobRequest* request,
                                             v1::InitJobResponse* response) {
  if (absl::Status s = FromCoordinator(*context); !s.ok())
    return ToGrpcStatus(s);
  JobInit init;
  init.job_id = request->job_id();
  init.spec = request->spec();
  init.shard_index = request->shard_index();
  init.num_shards = request->num_shards();
  init.generation = request->generation();
  init.workers.assign(request->workers().begin(), request->workers().end());
  const bool checkpoints = init.spec.checkpoint().every_steps() > 0;
  if (checkpoints) {
    ShardMetrics* m = metrics_;
    init.on_checkpoint = [m, job_id = init.job_id](int64_t step,
                                                   double seconds,
                                                   const absl::Status& s) {
      m->CheckpointWritten(job_id, step, seconds, s.ok());
      if (!s.ok())
        std::cerr << "fulcrum-server: checkpoint failed: " << s << "\n";
    };
  }
  {
    ShardMetrics* m = metrics_;
    init.on_nonfinite = [m, job_id = init.job_id](const NonFiniteUpdate& u) {
      m->nonfinite_updates.WithLabels({job_id}).Increment();
      std::cerr << "fulcrum-server: job " << job_id << " step " << u.step
                << " partition " << u.partition
                << ": update refused, it would have made values non-finite "
                   "(largest element "
                << u.largest << " from " << u.worker_id << ")\n";
    };
  }
  absl::StatusOr<std::shared_ptr<JobShard>> job = shard_->InitJob(init);
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (checkpoints) metrics_->CheckpointsEnabled(init.job_id);
  for (int32_t id : (*job)->partition_ids()) response->add_partitions(id);
  response->set_initialized((*job)->initialized());
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::EndJob(grpc::ServerContext* context,
                                            const v1::EndJobRequest* request,
                                            v1::EndJobResponse*) {
  if (absl::Status s = FromCoordinator(*context); !s.ok())
    return ToGrpcStatus(s);
  shard_->EndJob(request->job_id());
  return grpc::Status::OK;
}

namespace {

// A shard restarted at its address serves nobody until it has registered
// (again) and knows the coordinator's credential: callers retry.
absl::Status NotRegistered() {
  return absl::UnavailableError(
      "this shard has not registered with the coordinator yet; retry");
}

}  // namespace

absl::Status ParameterServerService::FromCoordinator(
    const grpc::ServerContext& context) const {
  if (options_.coordinator == nullptr) return absl::OkStatus();
  const std::string key = options_.coordinator->Get();
  if (key.empty()) return NotRegistered();
  const auto& md = context.client_metadata();
  auto it = md.find(kCoordinatorMetadataKey);
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "only the coordinator may make this call: no coordinator credential");
  }
  if (!SameCredential(key,
                      std::string_view(it->second.data(), it->second.size()))) {
    return absl::PermissionDeniedError(
        "only the coordinator may make this call: the credential is not the "
        "coordinator's this shard registered with");
  }
  return absl::OkStatus();
}

absl::Status ParameterServerService::AsWorker(
    const std::string& job_id, const std::string& worker_id,
    const std::string& credential) const {
  if (options_.coordinator == nullptr) return absl::OkStatus();
  const std::string key = options_.coordinator->Get();
  if (key.empty()) return NotRegistered();
  if (!SameCredential(StreamCredential(key, job_id, worker_id), credential)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker '", worker_id.substr(0, 64), "': the credential is not this "
        "member's for job ", job_id.substr(0, 64),
        " (the coordinator gives it with the assignment)"));
  }
  return absl::OkStatus();
}

absl::Status ParameterServerService::Admit(const Watchdog::Deadline* deadline,
                                           std::function<void()> expire,
                                           uint64_t* watch) {
  if (open_streams_.fetch_add(1) >= options_.max_streams) {
    open_streams_.fetch_sub(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        "this shard serves ", options_.max_streams,
        " streams already (fulcrum-server --max_streams); retry later"));
  }
  metrics_->streams.WithLabels().Set(open_streams_.load());
  *watch = watchdog_.Arm(deadline, std::move(expire));
  return absl::OkStatus();
}

void ParameterServerService::Leave(uint64_t watch) {
  watchdog_.Disarm(watch);  // after this, no TryCancel on a gone context
  metrics_->streams.WithLabels().Set(open_streams_.fetch_sub(1) - 1);
}

grpc::Status ParameterServerService::StreamFrames(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<ResponseFrame, RequestFrame>* stream) {
  Watchdog::Deadline deadline(absl::Now() + options_.hello_timeout);
  uint64_t watch = 0;
  absl::Status s = Admit(&deadline, [context] { context->TryCancel(); }, &watch);
  if (s.ok()) {
    s = ServeStream(context, stream, &deadline);
    Leave(watch);
  }
  if (!s.ok() && s.code() != absl::StatusCode::kCancelled) {
    metrics_->Rejected(
        absl::AsciiStrToLower(absl::StatusCodeToString(s.code())));
  }
  return ToGrpcStatus(s);
}

absl::Status ParameterServerService::ServeStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<ResponseFrame, RequestFrame>* stream,
    Watchdog::Deadline* deadline) {
  RequestFrame request;
  if (!stream->Read(&request)) {
    return context->IsCancelled()
               ? absl::DeadlineExceededError(absl::StrCat(
                     "no hello within ", absl::FormatDuration(
                                             options_.hello_timeout)))
               : absl::OkStatus();
  }
  Busy(deadline);
  RETURN_IF_ERROR(FromGrpcStatus(request.parse_error));
  if (!request.message.has_hello()) {
    return absl::FailedPreconditionError(
        "the first message of a stream must be hello");
  }
  WorkerStream::Options options;
  options.step_timeout = options_.step_timeout;
  options.metrics = metrics_;
  options.cancelled = [context] { return context->IsCancelled(); };
  const v1::Hello hello = request.message.hello();
  ASSIGN_OR_RETURN(const StreamHello admitted, AdmitHello(hello));
  std::vector<int64_t> slots;
  const std::unique_ptr<ShmSegment> segment =
      hello.has_shm() ? MapSegment(hello, &slots) : nullptr;
  std::optional<StreamRings> rings;
  if (segment != nullptr && hello.shm().ring_bytes() != 0) {
    absl::StatusOr<StreamRings> in =
        StreamRings::In(*segment, hello.shm().ring_bytes());
    if (!in.ok()) return in.status();
    rings.emplace(std::move(*in));
  }
  StreamWriterSink sink(stream);
  FrameParamsWriter writer(&sink, segment.get(), &slots);
  if (rings) {
    writer.UseRing(&rings->responses, options_.step_timeout,
                   [context] { return context->IsCancelled(); });
  }
  // However the stream ends, a worker reading the response ring hears it
  // at once (its gRPC watcher would too, a little later).
  const absl::Cleanup close_responses = [&rings] {
    if (rings) rings->responses.Close();
  };
  ASSIGN_OR_RETURN(std::unique_ptr<WorkerStream> worker,
                   WorkerStream::Open(*shard_, admitted, std::move(options),
                                      &writer));
  if (!rings) {
    return ServePushes([context] { return context->IsCancelled(); }, deadline,
                       segment.get(), *worker,
                       [stream](RequestFrame* r) -> absl::StatusOr<bool> {
                         return stream->Read(r);
                       });
  }
  return ServePushes([context] { return context->IsCancelled(); }, deadline,
                     segment.get(), *worker,
                     [&rings, context](RequestFrame* r) {
                       return ReadRingRequest(
                           rings->requests,
                           [context] { return context->IsCancelled(); }, r);
                     });
}

absl::StatusOr<StreamHello> ParameterServerService::AdmitHello(
    const v1::Hello& hello) const {
  RETURN_IF_ERROR(AsWorker(hello.job_id(), hello.worker_id(), hello.credential()));
  StreamHello admitted{hello.job_id(), hello.worker_id(), hello.generation()};
  for (const v1::GroupMember& member : hello.group()) {
    RETURN_IF_ERROR(
        AsWorker(hello.job_id(), member.worker_id(), member.credential()));
    admitted.group.push_back(member.worker_id());
  }
  return admitted;
}

absl::Status ParameterServerService::ServePushes(
    absl::FunctionRef<bool()> cancelled, Watchdog::Deadline* deadline,
    const ShmSegment* segment, WorkerStream& worker,
    absl::FunctionRef<absl::StatusOr<bool>(RequestFrame*)> next) {
  RequestFrame request;
  PushChunk chunk;  // reused: FromPush sets every field a push carries
  for (;;) {
    Idle(deadline, options_.idle_timeout);
    ASSIGN_OR_RETURN(const bool read, next(&request));
    if (!read) break;
    Busy(deadline);  // a read may wait for the other workers (step_timeout)
    RETURN_IF_ERROR(FromGrpcStatus(request.parse_error));
    // more[]: pushes of the same batch, through the segment.
    RETURN_IF_ERROR(CheckPushes(request.message, segment));
    for (int i = 0; i < PushCount(request.message); ++i) {
      RETURN_IF_ERROR(PushAt(request, i, segment, &chunk));
      RETURN_IF_ERROR(worker.Push(chunk));
      RETURN_IF_ERROR(CheckSegment(segment));
    }
  }
  if (cancelled()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no message within ", absl::FormatDuration(options_.idle_timeout)));
  }
  return absl::OkStatus();
}

std::unique_ptr<ShmSegment> ParameterServerService::MapSegment(
    const v1::Hello& hello, std::vector<int64_t>* slots) {
  absl::Status why;
  std::unique_ptr<ShmSegment> segment;
  if (!options_.shared_memory) {
    why = absl::FailedPreconditionError("--shared_memory=false");
  } else if (absl::StatusOr<std::shared_ptr<JobShard>> job =
                 shard_->Find(hello.job_id());
             !job.ok()) {
    why = job.status();  // the stream fails on it next
  } else if (absl::StatusOr<std::unique_ptr<ShmSegment>> mapped =
                 ShmSegment::Attach(hello.shm().name(), hello.shm().nonce());
             !mapped.ok()) {
    why = mapped.status();
  } else {
    // A slot for each partition held here, 4 bytes an element, in the
    // job's order (the worker picks its own slots for pushes and reads
    // ours from params.shm).
    slots->assign((*job)->layout().partitions().size(), -1);
    int64_t need = 0;
    for (int32_t id : (*job)->partition_ids()) {
      (*slots)[id] = need;
      need += (*job)->PartitionSize(id) * 4;
    }
    if (need > (*mapped)->params_bytes()) {
      why = absl::InvalidArgumentError(absl::StrCat(
          "hello.shm: the segment's parameter region holds ",
          (*mapped)->params_bytes(), " bytes; the partitions here need ",
          need));
    } else {
      segment = std::move(*mapped);
    }
  }
  metrics_->shm_streams.WithLabels({segment != nullptr ? "mapped" : "refused"})
      .Increment();
  if (segment == nullptr) {
    std::cerr << "fulcrum-server: job " << hello.job_id().substr(0, 64)
              << " worker " << hello.worker_id().substr(0, 64)
              << ": shared-memory segment not mapped (" << why.message()
              << "); the stream's payloads go over TCP\n";
  }
  return segment;
}

grpc::Status ParameterServerService::Reconfigure(
    grpc::ServerContext* context, const v1::ReconfigureRequest* request,
    v1::ReconfigureResponse* response) {
  if (absl::Status s = FromCoordinator(*context); !s.ok())
    return ToGrpcStatus(s);
  absl::StatusOr<std::shared_ptr<JobShard>> found =
      shard_->Find(request->job_id());
  if (!found.ok()) return ToGrpcStatus(found.status());
  JobShard& job = **found;
  const std::vector<std::string> workers(request->workers().begin(),
                                         request->workers().end());
  if (request->align_version() < 0) {
    std::optional<int64_t> restore;
    if (request->restore()) restore = request->restore_step();
    absl::StatusOr<Adopted> adopted =
        job.Adopt(request->generation(), workers, restore);
    if (!adopted.ok()) return ToGrpcStatus(adopted.status());
    std::string rows;
    for (const auto& [table, n] : adopted->restored_rows)
      absl::StrAppend(&rows, ", table ", table, " ", n, " rows");
    std::cerr << "fulcrum-server: job " << request->job_id() << " generation "
              << request->generation() << " adopted"
              << (restore ? absl::StrCat(" (restored step ", *restore,
                                         " as shard ", job.init().shard_index,
                                         rows, ")")
                          : "")
              << "\n";
    response->set_min_version(adopted->min_version);
    for (int64_t step : adopted->checkpoint_steps)
      response->add_checkpoint_steps(step);
    response->set_checkpoints_nothing(job.CheckpointsNothing());
    return grpc::Status::OK;
  }
  absl::StatusOr<Aligned> aligned =
      job.Align(request->generation(), workers, request->align_version());
  if (!aligned.ok()) return ToGrpcStatus(aligned.status());
  std::cerr << "fulcrum-server: job " << request->job_id() << " generation "
            << request->generation() << " aligned at version "
            << request->align_version() << "\n";
  response->set_min_version(request->align_version());
  response->set_has_ledger(aligned->has_ledger);
  response->set_initialized(aligned->initialized);
  for (const auto& [chunk, e] : aligned->ledger) {
    v1::LedgerEntry* r = response->add_ledger();
    r->set_chunk(chunk);
    r->set_end(e.end);
    r->set_samples(e.samples);
  }
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Pull(
    grpc::ServerContext* context, const v1::PullRequest* request,
    grpc::ServerWriter<v1::Params>* writer) {
  if (absl::Status s = FromCoordinator(*context); !s.ok())
    return ToGrpcStatus(s);
  absl::StatusOr<std::shared_ptr<JobShard>> found =
      shard_->Find(request->job_id());
  if (!found.ok()) return ToGrpcStatus(found.status());
  v1::Params params;
  GrpcParamsWriter out(writer, &params, &params);
  return ToGrpcStatus(SendPartitions(
      **found, {request->partitions().begin(), request->partitions().end()},
      &out, metrics_->ForJob(request->job_id()).pull_bytes));
}

grpc::Status ParameterServerService::Initialize(
    grpc::ServerContext* context,
    grpc::ServerReader<v1::InitializeRequest>* reader,
    v1::InitializeResponse*) {
  Watchdog::Deadline deadline(absl::Now() + options_.hello_timeout);
  uint64_t watch = 0;
  absl::Status s = Admit(&deadline, [context] { context->TryCancel(); }, &watch);
  if (!s.ok()) return ToGrpcStatus(s);
  s = ServeInitialize(context, reader, &deadline);
  Leave(watch);
  return ToGrpcStatus(s);
}

absl::Status ParameterServerService::ServeInitialize(
    grpc::ServerContext* context,
    grpc::ServerReader<v1::InitializeRequest>* reader,
    Watchdog::Deadline* deadline) {
  v1::InitializeRequest r;
  std::shared_ptr<JobShard> job;
  for (;;) {
    Idle(deadline,
         job == nullptr ? options_.hello_timeout : options_.idle_timeout);
    if (!reader->Read(&r)) break;
    Busy(deadline);
    RETURN_IF_ERROR(AsWorker(r.job_id(), r.worker_id(), r.credential()));
    if (job == nullptr) {
      ASSIGN_OR_RETURN(job, shard_->Find(r.job_id()));
    }
    RETURN_IF_ERROR(job->Initialize(r.worker_id(), r.generation(),
                                    r.partition(), r.offset(), r.data().data(),
                                    r.data().size()));
  }
  if (context->IsCancelled())
    return absl::DeadlineExceededError("the upload stalled: no chunk in time");
  return absl::OkStatus();
}

}  // namespace fulcrum
