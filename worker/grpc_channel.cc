#include "worker/grpc_channel.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/dataplane/shm_segment.h"
#include "common/net/grpc_options.h"
#include "common/net/retry.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"

namespace fulcrum {

bool SharedMemoryFromEnvironment() {
  const char* v = std::getenv("FULCRUM_SHARED_MEMORY");
  if (v == nullptr) return true;
  const std::string s = v;
  return !(s == "0" || s == "false" || s == "off");
}

// Whether a connection's payloads go through its shared-memory segment.
enum class ShmState {
  kNone,     // none offered (TCP)
  kPending,  // offered; the shard's first Params will say
  kMapped,   // the shard mapped it: pushes go through it
  kRefused,  // the shard said no (or the connection ended first): TCP
};

// One attempt at the stream to a shard.
struct GrpcParameterChannel::Connection {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<RequestFrame, ResponseFrame>> rw;
  // Offered in the hello; released once refused. A new connection offers
  // a new segment, so a slot is never rewritten while a shard's handler of
  // an older connection may still read it.
  std::unique_ptr<ShmSegment> shm;
  ShmState shm_state = ShmState::kNone;  // guarded by the stream's mu
};

struct GrpcParameterChannel::Stream {
  int shard = 0;
  std::vector<int32_t> partitions;
  // Shared memory: where each partition's gradient goes in a segment's
  // gradient region (bytes from its start; by partition id, -1: another
  // stream's), and the region's size (4 bytes an element, each side).
  std::vector<int64_t> grad_slot;
  int64_t region_bytes = 0;
  bool shm_warned = false;  // receiver thread only
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::internal::RpcMethod> method;  // Stream, with frames
  std::thread sender, receiver;
  absl::Mutex mu;
  std::vector<QueuedPush> queue ABSL_GUARDED_BY(mu);  // reserved up front
  // Pushes of the current step already written: sent again on a new
  // connection. Cleared when the step's parameters arrived.
  std::vector<QueuedPush> sent ABSL_GUARDED_BY(mu);
  // The connection being opened or in use (for Cancel), and the one the
  // sender writes to (set once hello is written: one writer at a time).
  std::shared_ptr<Connection> attempt ABSL_GUARDED_BY(mu);
  std::shared_ptr<Connection> conn ABSL_GUARDED_BY(mu);
  bool closing ABSL_GUARDED_BY(mu) = false;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  // The sender has left (after its half-close of the connection it saw):
  // a connection opened later is half-closed by the receiver itself, or its
  // Read would wait for a shard that waits for pushes.
  bool sender_done ABSL_GUARDED_BY(mu) = false;
  bool receiver_done ABSL_GUARDED_BY(mu) = false;
};

GrpcParameterChannel::GrpcParameterChannel(ChannelOptions options,
                                           const ParameterLayout* layout,
                                           float* params,
                                           ConfigureContext configure)
    : options_(std::move(options)),
      configure_(std::move(configure)),
      layout_(layout),
      params_(params),
      chunk_elems_(options_.chunk_bytes / 4),
      arrivals_(layout),
      encoder_(ChannelEncoder(options_, layout, &own_encoder_)) {}

GrpcParameterChannel::~GrpcParameterChannel() {
  Cancel();
  Close().IgnoreError();
}

std::shared_ptr<GrpcParameterChannel::Connection>
GrpcParameterChannel::Connect(Stream* s) {
  auto conn = std::make_shared<Connection>();
  if (configure_) configure_(&conn->context);
  {
    absl::MutexLock lock(&s->mu);
    // Closing: the sender may have left, so nobody would end this stream.
    if (s->closing || s->cancelled) return nullptr;
    s->attempt = conn;  // reachable by Cancel() before the call starts
  }
  conn->rw.reset(
      grpc::internal::ClientReaderWriterFactory<RequestFrame, ResponseFrame>::
          Create(s->channel.get(), *s->method, &conn->context));
  RequestFrame hello;
  v1::Hello* h = hello.message.mutable_hello();
  h->set_job_id(options_.job_id);
  h->set_worker_id(options_.worker_id);
  h->set_generation(options_.generation);
  if (s->shard < static_cast<int>(options_.shard_credentials.size()))
    h->set_credential(options_.shard_credentials[s->shard]);
  OfferSharedMemory(s, *conn, h);
  // A failed write means a failed stream: the receiver sees its status.
  conn->rw->Write(hello);
  bool half_close = false;
  {
    absl::MutexLock lock(&s->mu);
    s->conn = conn;
    half_close = s->sender_done;  // Close() began while we connected
  }
  if (half_close) conn->rw->WritesDone();  // the only writer left
  return conn;
}

void GrpcParameterChannel::OfferSharedMemory(Stream* s, Connection& conn,
                                             v1::Hello* hello) {
  const std::string& address = options_.shard_addresses[s->shard];
  if (!options_.shared_memory || s->region_bytes == 0 ||
      !IsOnThisHost(address)) {
    return;
  }
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      ShmSegment::Create(s->region_bytes, s->region_bytes);
  if (!segment.ok()) {
    if (!s->shm_warned) {
      s->shm_warned = true;
      std::cerr << "fulcrum-worker: shard " << s->shard << " (" << address
                << "): no shared memory (" << segment.status().message()
                << "); payloads go over TCP\n";
    }
    return;
  }
  conn.shm = std::move(*segment);
  conn.shm_state = ShmState::kPending;  // nobody else sees conn yet
  hello->mutable_shm()->set_name(conn.shm->name());
  hello->mutable_shm()->set_nonce(conn.shm->nonce());
}

absl::Status GrpcParameterChannel::Initialize(const float* values) {
  for (int shard = 0; shard < layout_->num_shards(); ++shard) {
    const std::vector<int32_t> ids = layout_->PartitionsOfShard(shard);
    if (ids.empty()) continue;
    if (shard >= static_cast<int>(options_.shard_addresses.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("no address for shard ", shard));
    }
    auto stub = v1::ParameterServer::NewStub(
        MakeChannel(options_.shard_addresses[shard]));
    grpc::ClientContext context;
    SetTimeout(&context,
               absl::ToChronoMilliseconds(options_.connect_timeout));
    v1::InitializeResponse response;
    auto writer = stub->Initialize(&context, &response);
    v1::InitializeRequest r;
    r.set_job_id(options_.job_id);
    r.set_worker_id(options_.worker_id);
    r.set_generation(options_.generation);
    if (shard < static_cast<int>(options_.shard_credentials.size()))
      r.set_credential(options_.shard_credentials[shard]);
    bool ok = true;
    for (int32_t id : ids) {
      const Partition& p = layout_->partitions()[id];
      r.set_partition(id);
      ok = ok && ForEachChunk(p, 1, chunk_elems_, [&](int64_t offset, int64_t n) {
        r.set_offset(offset);
        r.set_data(values + p.offset + offset, n * sizeof(float));
        return writer->Write(r);
      });
    }
    writer->WritesDone();
    const absl::Status s = FromGrpcStatus(writer->Finish());
    // Another member was first: the job holds values; that is fine.
    if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) {
      return absl::Status(s.code(), absl::StrCat("initializing shard ", shard,
                                                 ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> GrpcParameterChannel::Open() {
  const size_t n = layout_->partitions().size();
  stream_of_partition_.assign(n, -1);
  for (int shard = 0; shard < layout_->num_shards(); ++shard) {
    const std::vector<int32_t> ids = layout_->PartitionsOfShard(shard);
    if (ids.empty()) continue;  // more shards than partitions
    if (shard >= static_cast<int>(options_.shard_addresses.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("no address for shard ", shard));
    }
    auto s = std::make_unique<Stream>();
    s->shard = shard;
    s->partitions = ids;
    s->grad_slot.assign(n, -1);
    for (int32_t id : ids) {
      s->grad_slot[id] = s->region_bytes;
      s->region_bytes += layout_->partitions()[id].size * 4;
    }
    s->channel = MakeChannel(options_.shard_addresses[shard]);
    s->method = std::make_unique<grpc::internal::RpcMethod>(
        StreamMethodName(), grpc::internal::RpcMethod::BIDI_STREAMING,
        s->channel);
    {
      absl::MutexLock lock(&s->mu);
      s->queue.reserve(ids.size() * 4);
      s->sent.reserve(ids.size() * 4);
    }
    for (int32_t id : ids)
      stream_of_partition_[id] = static_cast<int>(streams_.size());
    streams_.push_back(std::move(s));
  }
  // Names left by workers that were killed before a shard mapped them.
  if (options_.shared_memory) ShmSegment::SweepStale();
  for (auto& s : streams_) {
    Stream* raw = s.get();
    s->receiver = std::thread([this, raw] { ReceiveLoop(raw); });
    s->sender = std::thread([this, raw] { SendLoop(raw); });
  }
  // Initial parameters: every partition answered, all at the same clock.
  return arrivals_.WaitForAll(absl::Now() + options_.connect_timeout);
}

void GrpcParameterChannel::Push(int32_t id, int64_t step, int64_t samples,
                                const float* grads, bool stop,
                                PushRange range) {
  Stream* s = streams_[stream_of_partition_[id]].get();
  absl::MutexLock lock(&s->mu);
  s->queue.push_back({id, step, samples, grads, stop, range});
}

namespace {

// Pushes of one message at most, with shared memory (StreamRequest.more).
constexpr int kMaxBatchedPushes = 64;

// Every field of `push` but the payload's (data, shm, indices): those of
// `item`'s chunk at `offset`. Indices and shm cleared.
void FillPush(const QueuedPush& item, int64_t offset, WireEncoding encoding,
              v1::Push* push) {
  push->set_step(item.step);
  push->set_partition(item.id);
  push->set_offset(offset);
  push->set_samples(item.samples);
  push->set_stop(item.stop);
  push->set_encoding(static_cast<v1::Encoding>(encoding));
  if (item.range.chunk >= 0 && item.samples > 0) {
    v1::DataRange* r = push->mutable_range();
    r->set_chunk(item.range.chunk);
    r->set_begin(item.range.begin);
    r->set_end(item.range.end);
  } else {
    push->clear_range();
  }
  push->clear_indices();
  push->clear_shm();
}

}  // namespace

void GrpcParameterChannel::SendLoop(Stream* s) {
  std::vector<QueuedPush> batch;
  batch.reserve(layout_->partitions().size() * 4);
  RequestFrame request;
  request.pins = &pins_;
  const WireEncoding encoding = encoder_->encoding();
  std::shared_ptr<Connection> conn;
  const ShmSegment* shm = nullptr;  // conn's, when mapped (conn holds it)
  for (;;) {
    {
      absl::MutexLock lock(&s->mu);
      s->mu.Await(absl::Condition(
          +[](Stream* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) {
            // A segment's fate is known before the first push uses it.
            return (!st->queue.empty() && st->conn != nullptr &&
                    st->conn->shm_state != ShmState::kPending) ||
                   st->closing;
          },
          s));
      if (s->queue.empty() || s->conn == nullptr ||
          s->conn->shm_state == ShmState::kPending) {
        break;  // closing
      }
      batch.swap(s->queue);
      conn = s->conn;
      shm = conn->shm_state == ShmState::kMapped ? conn->shm.get() : nullptr;
      s->sent.insert(s->sent.end(), batch.begin(), batch.end());
    }
    // Over TCP each chunk is a message; with shared memory a batch's pushes
    // go in one (push, then more[]): one wake-up of the shard.
    int held = 0;
    auto flush = [&] {
      if (held == 0) return true;
      held = 0;
      request.out_bytes = 0;
      const bool written = conn->rw->Write(request);
      request.message.clear_more();
      return written;
    };
    bool ok = true;
    for (const QueuedPush& item : batch) {
      const Partition& p = layout_->partitions()[item.id];
      // A failed write: the receiver reconnects and re-queues `sent`.
      ok = ForEachChunk(p, item.samples, chunk_elems_,
                        [&](int64_t offset, int64_t n) {
        v1::Push* push = shm != nullptr && held > 0
                             ? request.message.add_more()
                             : request.message.mutable_push();
        FillPush(item, offset, encoding, push);
        GradientEncoder::Chunk c;
        if (n > 0) {
          c = encoder_->Encode(item.id, offset, n, item.grads, item.step,
                               options_.generation);
          push->set_indices(c.indices.data(), c.indices.size());
        }
        if (shm == nullptr) {
          request.out = c.data;
          request.out_bytes = c.bytes;
          return conn->rw->Write(request);
        }
        if (n > 0) {
          // The slot is free: the shard consumed its last contents before
          // answering the previous step, whose parameters this step was
          // computed from.
          const int64_t at =
              shm->grad_offset() + s->grad_slot[item.id] + offset * 4;
          std::memcpy(shm->at(at), c.data, c.bytes);
          v1::ShmRef* ref = push->mutable_shm();
          ref->set_offset(at);
          ref->set_bytes(static_cast<int64_t>(c.bytes));
        }
        return ++held < kMaxBatchedPushes || flush();
      });
      if (!ok) break;
    }
    if (ok) {
      flush();  // a failed write: as above
    } else {
      request.message.clear_more();
      held = 0;
    }
    batch.clear();
  }
  {
    absl::MutexLock lock(&s->mu);
    conn = s->conn;  // the newest connection, if one is open
    s->sender_done = true;  // a newer one is half-closed by Connect
  }
  if (conn != nullptr) conn->rw->WritesDone();
}

bool GrpcParameterChannel::Receive(Stream* s, Connection& conn,
                                   bool* answered) {
  ResponseFrame response;
  while (conn.rw->Read(&response)) {
    if (!response.parse_error.ok()) {
      arrivals_.Fail(absl::InternalError(
          absl::StrCat("shard ", s->shard, " sent a message that does not "
                       "parse: ", response.parse_error.error_message())));
      return false;
    }
    if (!Apply(s, conn, response.message.params(), response.data)) return false;
    *answered = true;
    for (const v1::Params& more : response.message.more()) {
      if (!more.has_shm() || !more.data().empty()) {
        arrivals_.Fail(absl::InternalError(absl::StrCat(
            "shard ", s->shard, " sent more[] parameters that are not in the "
            "shared-memory segment")));
        return false;
      }
      if (!Apply(s, conn, more, Payload())) return false;
    }
  }
  return true;
}

bool GrpcParameterChannel::Apply(Stream* s, Connection& conn,
                                 const v1::Params& p,
                                 const Payload& inline_data) {
  const int32_t id = p.partition();
  if (id < 0 || id >= static_cast<int32_t>(stream_of_partition_.size()) ||
      stream_of_partition_[id] < 0 ||
      streams_[stream_of_partition_[id]].get() != s) {
    arrivals_.Fail(absl::InternalError(absl::StrCat(
        "shard ", s->shard, " sent unknown partition ", id)));
    return false;
  }
  const Partition& part = layout_->partitions()[id];
  Payload in_segment;
  if (!ShmPayload(s, conn, p, inline_data, &in_segment)) return false;
  const Payload& data = p.has_shm() ? in_segment : inline_data;
  const int64_t n = data.elements();
  if (p.offset() < 0 || p.offset() + n > part.size ||
      data.bytes() % ElementBytes(data.encoding()) != 0) {
    arrivals_.Fail(absl::InternalError(absl::StrCat(
        "shard ", s->shard, " sent a bad chunk of partition ", id)));
    return false;
  }
  Decode(data, params_ + part.offset + p.offset());
  arrivals_.Received(id, n, p.clock(), p.stop());
  return true;
}

bool GrpcParameterChannel::ShmPayload(Stream* s, Connection& conn,
                                      const v1::Params& p,
                                      const Payload& inline_data,
                                      Payload* out) {
  absl::Status error;
  {
    absl::MutexLock lock(&s->mu);
    if (conn.shm_state == ShmState::kPending) {
      // The first Params says whether the shard mapped the segment.
      conn.shm_state =
          p.has_shm() ? ShmState::kMapped : ShmState::kRefused;
      if (!p.has_shm()) {
        conn.shm.reset();
        if (!s->shm_warned) {
          s->shm_warned = true;
          std::cerr << "fulcrum-worker: shard " << s->shard
                    << " did not map the shared-memory segment (see its "
                       "log); payloads go over TCP\n";
        }
      }
    }
    if (!p.has_shm()) return true;
    if (conn.shm_state != ShmState::kMapped || inline_data.bytes() != 0) {
      error = absl::InternalError(absl::StrCat(
          "shard ", s->shard, " sent params.shm on a stream whose segment it ",
          "did not map, or with params.data"));
    }
  }
  if (error.ok()) {
    absl::StatusOr<WireEncoding> encoding =
        EncodingFromProto(p.encoding(), "params.encoding");
    absl::StatusOr<const char*> bytes =
        encoding.ok() ? conn.shm->Params(p.shm().offset(), p.shm().bytes(),
                                         "params.shm")
                      : absl::StatusOr<const char*>(encoding.status());
    if (bytes.ok()) {
      *out = Payload(*bytes, static_cast<size_t>(p.shm().bytes()), *encoding);
      return true;
    }
    error = absl::InternalError(absl::StrCat("shard ", s->shard, " sent ",
                                             bytes.status().message()));
  }
  arrivals_.Fail(error);
  return false;
}

void GrpcParameterChannel::ReceiveLoop(Stream* s) {
  ReceiveConnections(s);
  absl::MutexLock lock(&s->mu);
  s->receiver_done = true;
}

void GrpcParameterChannel::ReceiveConnections(Stream* s) {
  std::mt19937_64 rng(std::hash<std::string>()(options_.worker_id) + s->shard);
  absl::Time retry_until = absl::InfiniteFuture();
  int attempt = 0;
  for (;;) {
    std::shared_ptr<Connection> conn = Connect(s);
    if (conn == nullptr) return;  // closing
    bool answered = false;
    const bool sane = Receive(s, *conn, &answered);
    {
      absl::MutexLock lock(&s->mu);  // ended before the shard said: TCP
      if (conn->shm_state == ShmState::kPending)
        conn->shm_state = ShmState::kRefused;
    }
    if (!sane) {
      conn->context.TryCancel();
      conn->rw->Finish().IgnoreError();
      return;
    }
    const grpc::Status status = conn->rw->Finish();
    {
      absl::MutexLock lock(&s->mu);
      if (status.ok() || s->closing || s->cancelled) return;
    }
    // RESOURCE_EXHAUSTED: the shard is at its stream bound (a flood of
    // idle streams is cancelled within its hello timeout): try again.
    const bool retryable =
        status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        status.error_code() == grpc::StatusCode::NOT_FOUND ||
        status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    const absl::Time now = absl::Now();
    if (answered) {  // the connection worked: a fresh retry budget
      attempt = 0;
      retry_until = absl::InfiniteFuture();
    }
    if (retry_until == absl::InfiniteFuture())
      retry_until = now + options_.reconnect_timeout;
    if (!retryable || now >= retry_until) {
      arrivals_.Fail(absl::Status(
          FromGrpcStatus(status).code(),
          absl::StrCat("shard ", s->shard, " (",
                       options_.shard_addresses[s->shard],
                       "): ", status.error_message())));
      return;
    }
    absl::SleepFor(absl::FromChrono(Backoff(
        attempt++, std::chrono::milliseconds(50),
        std::chrono::milliseconds(1000), rng())));
    arrivals_.Restart(s->partitions);
    if (options_.on_reconnect) options_.on_reconnect();
    // Send this step's pushes again on the next connection, first.
    absl::MutexLock lock(&s->mu);
    if (s->closing || s->cancelled) return;
    s->conn = nullptr;  // the sender waits for the next connection
    s->queue.insert(s->queue.begin(), s->sent.begin(), s->sent.end());
    s->sent.clear();
  }
}

absl::Status GrpcParameterChannel::WaitForClock(
    int64_t clock, absl::Time deadline, bool* stop,
    absl::FunctionRef<void(int32_t)> arrived) {
  RETURN_IF_ERROR(arrivals_.WaitForClock(clock, deadline, stop, arrived));
  // The step is applied everywhere: nothing of it needs sending again.
  for (auto& st : streams_) {
    absl::MutexLock lock(&st->mu);
    st->sent.clear();
  }
  return absl::OkStatus();
}

void GrpcParameterChannel::Cancel() {
  arrivals_.Cancel();
  for (auto& s : streams_) {
    absl::MutexLock lock(&s->mu);
    s->cancelled = true;
    if (s->attempt != nullptr) s->attempt->context.TryCancel();
  }
}

absl::Status GrpcParameterChannel::Close() {
  for (auto& s : streams_) {
    absl::MutexLock lock(&s->mu);
    s->closing = true;
  }
  // The shard ends each stream once it reads the half-close; one that does
  // not within connect_timeout (a shard that stopped answering) is cancelled.
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  for (auto& s : streams_) {
    if (s->sender.joinable()) s->sender.join();
    if (!s->receiver.joinable()) continue;
    {
      absl::MutexLock lock(&s->mu);
      if (!s->mu.AwaitWithDeadline(absl::Condition(&s->receiver_done),
                                   deadline)) {
        std::cerr << "fulcrum-worker: shard " << s->shard
                  << " did not end its stream within "
                  << absl::FormatDuration(options_.connect_timeout)
                  << " of the close; cancelling it\n";
        s->cancelled = true;
        if (s->attempt != nullptr) s->attempt->context.TryCancel();
      }
    }
    s->receiver.join();
  }
  streams_.clear();  // ends the calls and their connections
  // gRPC may still hold a slice of the gradient (or encoded_) in a
  // transport that is going away: the caller may free both once we return.
  if (!pins_.WaitUntilReleased(absl::Now() + absl::Seconds(10))) {
    std::cerr << "fulcrum-worker: gRPC still holds " << pins_.outstanding()
              << " gradient slices 10 s after the channel closed\n";
  }
  return arrivals_.error();
}

}  // namespace fulcrum
