#include "worker/grpc_channel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/dataplane/shm_segment.h"
#include "common/net/grpc_options.h"
#include "common/net/retry.h"
#include "common/status/grpc_status.h"
#include "common/status/payloads.h"
#include "common/status/status_macros.h"
#include "worker/grpc_channel_state.h"

namespace fulcrum {

bool SharedMemoryFromEnvironment() {
  const char* v = std::getenv("FULCRUM_SHARED_MEMORY");
  if (v == nullptr) return true;
  const std::string s = v;
  return !(s == "0" || s == "false" || s == "off");
}

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
  for (const GroupPeer& peer : options_.pushes_for) {
    v1::GroupMember* m = h->add_group();
    m->set_worker_id(peer.worker_id);
    if (s->shard < static_cast<int>(peer.shard_credentials.size()))
      m->set_credential(peer.shard_credentials[s->shard]);
  }
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
  // Rings for the stream's messages ahead of the gradient slots; a sparse
  // wire's pushes carry their indices in the message, up to a chunk's.
  int64_t ring_bytes = StreamRings::kDefaultBytes;
  if (encoder_->sparse()) {
    ring_bytes = std::max(ring_bytes, ShmRing::Bytes(2 * options_.chunk_bytes +
                                                     (64 << 10)));
  }
  if (ring_bytes > StreamRings::kMaxBytes) ring_bytes = 0;  // messages on gRPC
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      ShmSegment::Create(2 * ring_bytes + s->region_bytes, s->region_bytes);
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
  if (ring_bytes == 0) return;
  absl::StatusOr<StreamRings> rings = StreamRings::In(*conn.shm, ring_bytes);
  if (!rings.ok()) return;  // (cannot be: the region was sized for them)
  conn.rings.emplace(std::move(*rings));
  conn.slot_base = 2 * ring_bytes;
  hello->mutable_shm()->set_ring_bytes(ring_bytes);
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
    s->frame.pins = &pins_;
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
  return arrivals_.WaitForAll(
      absl::Now() + options_.connect_timeout,
      [this](int64_t clock, absl::Time deadline) {
        return ReadRings(clock, deadline);
      });
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
      arrivals_.Fail(Prefixed(absl::StrCat("shard ", s->shard, " (",
                                           options_.shard_addresses[s->shard],
                                           ")"),
                              FromGrpcStatus(status)));
      return;
    }
    // At most 0.5 s between attempts: with the channel's own reconnection
    // (kReconnectMaxMs + kConnectTimeoutMs) a healed link carries the stream
    // again within ~2 s.
    absl::SleepFor(absl::FromChrono(Backoff(
        attempt++, std::chrono::milliseconds(50),
        std::chrono::milliseconds(500), rng())));
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
  RETURN_IF_ERROR(arrivals_.WaitForClock(
      clock, deadline, stop, arrived,
      [this](int64_t c, absl::Time d) { return ReadRings(c, d); }));
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
    // A waiter reading a ring stops at once (arrivals_ says cancelled).
    // (Its segment is mapped while waiter_reads.)
    if (s->conn != nullptr && s->conn->waiter_reads.load())
      s->conn->rings->responses.Wake();
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
