// GrpcParameterChannel's receiving side: every Params checked (partition,
// range, the shared-memory reference) and decoded into the parameter
// buffer.
#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "worker/grpc_channel.h"
#include "worker/grpc_channel_state.h"

namespace fulcrum {

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
    if (response.message.rings() && !StartRings(s, conn)) return false;
    if (!ApplyMessage(s, conn, response.message, response.data,
                      response.more_data)) {
      return false;
    }
    *answered = true;
    if (conn.on_rings) return ReceiveRings(s, conn, answered);
  }
  return true;
}

bool GrpcParameterChannel::ApplyMessage(Stream* s, Connection& conn,
                                        const v1::StreamResponse& message,
                                        const Payload& inline_data,
                                        absl::Span<const Payload> more_data) {
  // The whole message is checked before any of it counts as arrived (a
  // wait that its first Params ended must not see success before the
  // failure of its more[]): each more[] has its payload in the segment or
  // out of line (a gRPC message's; a ring's are all in the segment).
  for (int i = 0; i < message.more_size(); ++i) {
    const v1::Params& more = message.more(i);
    const size_t m = static_cast<size_t>(i);
    const bool out_of_line = m < more_data.size() && more_data[m].bytes() > 0;
    if (!more.data().empty() || (more.has_shm() && out_of_line) ||
        (!more.has_shm() && m >= more_data.size())) {
      arrivals_.Fail(absl::InternalError(absl::StrCat(
          "shard ", s->shard, " sent more[] parameters whose values are "
          "not in exactly one of the message and the shared-memory "
          "segment")));
      return false;
    }
  }
  if (!Apply(s, conn, message.params(), inline_data)) return false;
  for (int i = 0; i < message.more_size(); ++i) {
    const size_t m = static_cast<size_t>(i);
    if (!Apply(s, conn, message.more(i),
               m < more_data.size() ? more_data[m] : Payload())) {
      return false;
    }
  }
  return true;
}

bool GrpcParameterChannel::StartRings(Stream* s, Connection& conn) {
  bool close_requests = false;
  {
    absl::MutexLock lock(&s->mu);
    if (conn.shm_state != ShmState::kPending || !conn.rings.has_value()) {
      arrivals_.Fail(absl::InternalError(absl::StrCat(
          "shard ", s->shard, " said `rings` on a message other than the "
          "first, or on a stream that offered none")));
      return false;
    }
    // Set before shm_state leaves kPending: the sender's first push sees
    // both.
    conn.on_rings = true;
    close_requests = s->sender_done;  // it half-closed gRPC, not the ring
  }
  if (close_requests) conn.rings->requests.Close();
  return true;
}

bool GrpcParameterChannel::ReceiveRings(Stream* s, Connection& conn,
                                        bool* answered) {
  {
    absl::MutexLock lock(&s->mu);
    if (conn.shm_state != ShmState::kMapped) {
      arrivals_.Fail(absl::InternalError(absl::StrCat(
          "shard ", s->shard, " said `rings` but did not map the segment")));
      return false;
    }
    conn.waiter_reads.store(true);
  }
  // A wait asleep on the arrivals reads the ring from now on.
  arrivals_.Poke();
  // The gRPC stream now carries only its end (the shard's status, a dead
  // shard, Cancel); a message there is ignored (the shard's end follows).
  ResponseFrame ignored;
  while (conn.rw->Read(&ignored)) {
  }
  {
    absl::MutexLock lock(&s->mu);
    conn.waiter_reads.store(false);
  }
  conn.grpc_ended.store(true);
  conn.rings->responses.Wake();  // a waiter in Read lets go of the ring
  {
    absl::MutexLock lock(&s->mu);
    s->mu.Await(absl::Condition(
        +[](Connection* c) { return !c->ring_busy; }, &conn));
  }
  // What the shard wrote before it ended the stream.
  v1::StreamResponse message;
  for (;;) {
    absl::StatusOr<bool> read = conn.rings->responses.Read(
        &message, absl::InfiniteFuture(), [] { return true; });
    if (!read.ok() && read.status().code() == absl::StatusCode::kCancelled)
      return true;  // empty and still open: a shard that died
    if (!read.ok()) {
      arrivals_.Fail(absl::InternalError(absl::StrCat(
          "shard ", s->shard, "'s response ring: ", read.status().message())));
      return false;
    }
    if (!*read) return true;
    if (!ApplyRingMessage(s, conn, message)) return false;
    *answered = true;
  }
}

bool GrpcParameterChannel::ApplyRingMessage(
    Stream* s, Connection& conn, const v1::StreamResponse& message) {
  if (message.rings() || !message.params().has_shm()) {
    arrivals_.Fail(absl::InternalError(absl::StrCat(
        "shard ", s->shard, " sent a message through the response ring "
        "whose parameters are not in the segment, or that says `rings`")));
    return false;
  }
  return ApplyMessage(s, conn, message, Payload(), {});
}

GrpcParameterChannel::OwnedRings GrpcParameterChannel::TakeRings(
    int64_t clock) {
  // Streams on rings that still owe a partition of `clock` (one that is
  // still on TCP, or whose connection is being replaced, is its
  // receiver's); a ring with a message waiting alone.
  OwnedRings owned;
  for (auto& st : streams_) {
    if (!arrivals_.Outstanding(st->partitions, clock)) continue;
    OwnedRing mine{st.get(), nullptr};
    bool waiting;
    {
      absl::MutexLock lock(&st->mu);
      const std::shared_ptr<Connection>& c = st->conn;
      if (c == nullptr || !c->waiter_reads.load() || c->ring_busy) continue;
      c->ring_busy = true;
      mine.conn = c;
      waiting = c->rings->responses.HasMessage();
    }
    if (waiting) {
      ReleaseRings(owned);  // (no stream's lock held)
      return {mine};
    }
    owned.push_back(std::move(mine));
  }
  return owned;
}

void GrpcParameterChannel::ReleaseRings(const OwnedRings& owned) {
  for (const OwnedRing& o : owned) {
    absl::MutexLock lock(&o.stream->mu);
    o.conn->ring_busy = false;
  }
}

bool GrpcParameterChannel::ReadRings(int64_t clock, absl::Time deadline) {
  const OwnedRings owned = TakeRings(clock);
  if (owned.empty()) return false;
  // A stream ended or the channel stopped: the wait looks again.
  auto stopped = [this](const Connection& c) {
    return c.grpc_ended.load() || !c.waiter_reads.load() ||
           arrivals_.stopped();
  };
  // Several shards owe partitions: sleep on all their rings at once and
  // read the first that has something (without futex_waitv: the first).
  size_t chosen = 0;
  if (owned.size() > 1) {
    absl::InlinedVector<ShmRing*, 8> rings;
    for (const OwnedRing& o : owned) rings.push_back(&o.conn->rings->responses);
    absl::StatusOr<int> any = ShmRing::AwaitAny(rings, deadline, [&] {
      return std::any_of(owned.begin(), owned.end(), [&](const OwnedRing& o) {
        return stopped(*o.conn);
      });
    });
    if (any.ok()) {
      chosen = static_cast<size_t>(*any);
    } else if (any.status().code() != absl::StatusCode::kUnimplemented) {
      ReleaseRings(owned);  // CANCELLED or the wait's own deadline
      return true;
    }
  }
  Stream* pick = owned[chosen].stream;
  const std::shared_ptr<Connection>& conn = owned[chosen].conn;
  v1::StreamResponse& message = pick->waiter_message;
  absl::StatusOr<bool> read = conn->rings->responses.Read(
      &message, deadline, [&] { return stopped(*conn); });
  bool sane = true;
  if (!read.ok()) {
    // CANCELLED: the stream ended or the channel stopped; DEADLINE_EXCEEDED:
    // the wait's own deadline. The wait looks again either way.
    const absl::StatusCode code = read.status().code();
    if (code != absl::StatusCode::kCancelled &&
        code != absl::StatusCode::kDeadlineExceeded) {
      arrivals_.Fail(absl::InternalError(
          absl::StrCat("shard ", pick->shard, "'s response ring: ",
                       read.status().message())));
      sane = false;
    }
  } else if (!*read) {
    conn->waiter_reads.store(false);  // the shard's end: its receiver's now
  } else {
    sane = ApplyRingMessage(pick, *conn, message);
  }
  // The shard sent nonsense: end the stream (its receiver hears it).
  if (!sane) conn->context.TryCancel();
  ReleaseRings(owned);
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

}  // namespace fulcrum
