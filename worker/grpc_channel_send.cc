// GrpcParameterChannel's sender thread: queued pushes onto the stream, as
// messages with their payload out of line (TCP) or as references into the
// connection's shared-memory segment, a batch in one message.
#include <cstring>

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
  absl::MutexLock lock(&s->mu);
  s->queue.push_back(push);
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

}  // namespace fulcrum
