// GrpcParameterChannel's sending side: pushes onto the stream, with their
// payloads out of line (TCP) or as references into the connection's
// shared-memory segment, a batch in one message - written by
// the sender thread from the queue, or, on a connection whose messages go
// through the segment's rings, by the pushing thread itself when nothing
// is queued or being written.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/grpc_channel.h"
#include "worker/grpc_channel_state.h"

namespace fulcrum {

void GrpcParameterChannel::Push(int32_t id, int64_t step, int64_t samples,
                                const float* grads, bool stop,
                                PushRange range) {
  Enqueue({id, step, samples, grads, stop, range});
}

void GrpcParameterChannel::PushShares(int32_t id, int64_t step,
                                      int64_t samples, const float* grads,
                                      bool stop,
                                      absl::Span<const MemberShare> shares) {
  Enqueue({id, step, samples, grads, stop, PushRange{}, shares});
}

void GrpcParameterChannel::Enqueue(const QueuedPush& push) {
  Stream* s = streams_[stream_of_partition_[push.id]].get();
  std::shared_ptr<Connection> conn;
  Route route;
  {
    absl::MutexLock lock(&s->mu);
    // On rings, with nothing queued before it and nobody writing, the
    // caller writes the push itself (a copy into its slot and a few
    // hundred bytes into the ring): no wake-up of the sender thread. Else
    // the sender takes it from the queue.
    if (!s->queue.empty() || s->writing || s->closing || s->cancelled ||
        s->conn == nullptr || !s->conn->on_rings ||
        s->conn->shm_state != ShmState::kMapped) {
      s->queue.push_back(push);
      return;
    }
    conn = s->conn;
    route = RouteOf(*conn);
    s->sent.push_back(push);  // re-sent from the queue if conn breaks
    s->writing = true;
  }
  WriteBatch(s, *conn, route, absl::MakeConstSpan(&push, 1));
  absl::MutexLock lock(&s->mu);
  s->writing = false;
}

namespace {

// Pushes of one message at most (StreamRequest.more).
constexpr int kMaxBatchedPushes = 64;
// Over TCP: payload bytes of one message at most (beyond, batching gains
// nothing per message and the shard starts reducing later).
constexpr int64_t kMaxBatchedBytes = 1 << 20;

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
  push->clear_shares();
  for (const MemberShare& share : item.shares) {
    v1::Share* out = push->add_shares();
    out->set_samples(share.samples);
    if (share.range.chunk >= 0 && share.samples > 0) {
      out->mutable_range()->set_chunk(share.range.chunk);
      out->mutable_range()->set_begin(share.range.begin);
      out->mutable_range()->set_end(share.range.end);
    }
  }
}

}  // namespace

GrpcParameterChannel::Route GrpcParameterChannel::RouteOf(Connection& conn) {
  Route route;
  if (conn.shm_state != ShmState::kMapped) return route;
  route.shm = conn.shm.get();
  if (conn.on_rings) route.ring = &conn.rings->requests;
  return route;
}

bool GrpcParameterChannel::WriteBatch(Stream* s, Connection& conn,
                                      Route route,
                                      absl::Span<const QueuedPush> batch) {
  RequestFrame& request = s->frame;
  const WireEncoding encoding = encoder_->encoding();
  const ShmSegment* shm = route.shm;
  ShmRing* ring = route.ring;
  // A batch's pushes go in one message (push, then more[]): one wake-up of
  // the shard. Their payloads are out of line (TCP: the frame's out and
  // more_out) or in the segment.
  int held = 0;
  // A message's size so far (a sparse wire's indices and a group's shares
  // ride in it; over TCP the payloads too): a ring's message stays under a
  // quarter of the ring, a TCP one under kMaxBatchedBytes.
  int64_t held_bytes = 0;
  // One message out: onto the gRPC stream, or through the request ring (a
  // failed write there ends the connection; its receiver reports it).
  auto write = [&] {
    if (ring == nullptr) return conn.rw->Write(request);
    const absl::Status w =
        ring->Write(request.message, absl::Now() + options_.reconnect_timeout,
                    [&conn] { return conn.grpc_ended.load(); });
    if (!w.ok() && w.code() != absl::StatusCode::kCancelled) {
      arrivals_.Fail(absl::UnavailableError(absl::StrCat(
          "shard ", s->shard, "'s request ring: ", w.message())));
      conn.context.TryCancel();
    }
    return w.ok();
  };
  auto flush = [&] {
    if (held == 0) return true;
    held = 0;
    held_bytes = 0;
    const bool written = write();
    request.message.clear_more();
    request.out = nullptr;
    request.out_bytes = 0;
    request.more_out.clear();
    return written;
  };
  for (const QueuedPush& item : batch) {
    const Partition& p = layout_->partitions()[item.id];
    const bool ok = ForEachChunk(p, item.samples, chunk_elems_,
                                 [&](int64_t offset, int64_t n) {
      v1::Push* push = held > 0 ? request.message.add_more()
                                : request.message.mutable_push();
      FillPush(item, offset, encoding, push);
      // The chunk's place in its slot (shared memory). The slot is free:
      // the shard consumed its last contents before answering the
      // previous step, whose parameters this step was computed from.
      const int64_t at = shm == nullptr
                             ? 0
                             : shm->grad_offset() + conn.slot_base +
                                   s->grad_slot[item.id] + offset * 4;
      char* room = shm == nullptr ? nullptr : shm->at(at);
      GradientEncoder::Chunk c;
      if (n > 0) {
        c = encoder_->Encode(item.id, offset, n, item.grads, item.step,
                             options_.generation, room);
        push->set_indices(c.indices.data(), c.indices.size());
      }
      if (shm == nullptr) {
        if (held == 0) {
          request.out = c.data;
          request.out_bytes = c.bytes;
        } else {
          request.more_out.push_back({c.data, c.bytes});
        }
        held_bytes += static_cast<int64_t>(c.bytes + push->ByteSizeLong());
        return (++held < kMaxBatchedPushes && held_bytes < kMaxBatchedBytes) ||
               flush();
      }
      if (n > 0) {
        // Narrowed straight into the slot, or copied there.
        if (c.data != room) std::memcpy(room, c.data, c.bytes);
        v1::ShmRef* ref = push->mutable_shm();
        ref->set_offset(at);
        ref->set_bytes(static_cast<int64_t>(c.bytes));
      }
      held_bytes += static_cast<int64_t>(push->ByteSizeLong()) + 8;
      return (++held < kMaxBatchedPushes &&
              (ring == nullptr || held_bytes < ring->capacity() / 4)) ||
             flush();
    });
    if (!ok) {
      request.message.clear_more();
      request.out = nullptr;
      request.out_bytes = 0;
      request.more_out.clear();
      return false;
    }
  }
  return flush();
}

void GrpcParameterChannel::SendLoop(Stream* s) {
  std::vector<QueuedPush> batch;
  batch.reserve(layout_->partitions().size() * 4);
  std::shared_ptr<Connection> conn;
  Route route;
  for (;;) {
    {
      absl::MutexLock lock(&s->mu);
      s->mu.Await(absl::Condition(
          +[](Stream* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) {
            // A segment's fate is known before the first push uses it; a
            // direct write (Enqueue) holds the stream's frame meanwhile.
            return !st->writing &&
                   ((!st->queue.empty() && st->conn != nullptr &&
                     st->conn->shm_state != ShmState::kPending) ||
                    st->closing);
          },
          s));
      if (s->queue.empty() || s->conn == nullptr ||
          s->conn->shm_state == ShmState::kPending) {
        break;  // closing
      }
      batch.swap(s->queue);
      conn = s->conn;
      route = RouteOf(*conn);
      s->sent.insert(s->sent.end(), batch.begin(), batch.end());
      s->writing = true;
    }
    // A failed write: the receiver reconnects and re-queues `sent`.
    WriteBatch(s, *conn, route, batch);
    batch.clear();
    absl::MutexLock lock(&s->mu);
    s->writing = false;
  }
  bool close_ring = false;
  {
    absl::MutexLock lock(&s->mu);
    // Closing: no direct write starts any more, and none is out (the wait
    // above), so the ring is closed after the last push.
    conn = s->conn;  // the newest connection, if one is open
    s->sender_done = true;  // a newer one is half-closed by Connect
    // (one that switches to rings later: by StartRings)
    close_ring = conn != nullptr && conn->on_rings;
  }
  // On rings the shard reads the request ring, not gRPC: close both.
  if (close_ring) conn->rings->requests.Close();
  if (conn != nullptr) conn->rw->WritesDone();
}

}  // namespace fulcrum
