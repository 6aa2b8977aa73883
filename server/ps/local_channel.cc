#include "server/ps/local_channel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/ps/worker_stream.h"

namespace fulcrum {

struct LocalParameterChannel::Link : public ParamsWriter {
  LocalParameterChannel* channel = nullptr;
  int shard = 0;
  std::thread thread;
  absl::Mutex mu;
  std::vector<QueuedPush> queue ABSL_GUARDED_BY(mu);
  bool closing ABSL_GUARDED_BY(mu) = false;
  bool cancelled ABSL_GUARDED_BY(mu) = false;

  bool Stopped() {
    absl::MutexLock lock(&mu);
    return closing || cancelled;
  }
  // Straight into the worker's parameters, in fp32; Send gives them what
  // the wire's encoding would make of them.
  ParamsRoom Reserve(int32_t partition, int64_t offset, int64_t,
                     WireEncoding) override {
    return {reinterpret_cast<char*>(
                channel->params_ +
                channel->layout_->partitions()[partition].offset + offset),
            WireEncoding::kFp32};
  }
  bool Send(const ParamsHeader& h) override {
    RoundTrip(h.encoding,
              channel->params_ +
                  channel->layout_->partitions()[h.partition].offset + h.offset,
              h.count);
    channel->arrivals_.Received(h.partition, h.count, h.clock, h.stop);
    return !Stopped();
  }
};

LocalParameterChannel::LocalParameterChannel(
    ChannelOptions options, std::vector<ParameterShard*> shards,
    const ParameterLayout* layout, float* params)
    : options_(std::move(options)),
      shards_(std::move(shards)),
      layout_(layout),
      params_(params),
      arrivals_(layout),
      encoder_(ChannelEncoder(options_, layout, &own_encoder_)) {}

LocalParameterChannel::~LocalParameterChannel() {
  Cancel();
  Close().IgnoreError();
}

absl::Status LocalParameterChannel::Initialize(const float* values) {
  const int64_t chunk_elems = options_.chunk_bytes / 4;
  for (int shard = 0; shard < layout_->num_shards(); ++shard) {
    const std::vector<int32_t> ids = layout_->PartitionsOfShard(shard);
    if (ids.empty()) continue;
    if (shard >= static_cast<int>(shards_.size()))
      return absl::InvalidArgumentError(absl::StrCat("no shard ", shard));
    absl::StatusOr<std::shared_ptr<JobShard>> job =
        shards_[shard]->Find(options_.job_id);
    if (!job.ok()) return job.status();
    absl::Status s;
    for (int32_t id : ids) {
      const Partition& p = layout_->partitions()[id];
      ForEachChunk(p, 1, chunk_elems, [&](int64_t offset, int64_t n) {
        s = (*job)->Initialize(
            options_.worker_id, options_.generation, id, offset,
            reinterpret_cast<const char*>(values + p.offset + offset),
            n * sizeof(float));
        return s.ok();
      });
      if (s.code() == absl::StatusCode::kFailedPrecondition) break;
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LocalParameterChannel::Open() {
  link_of_partition_.assign(layout_->partitions().size(), -1);
  for (int shard = 0; shard < layout_->num_shards(); ++shard) {
    const std::vector<int32_t> ids = layout_->PartitionsOfShard(shard);
    if (ids.empty()) continue;
    if (shard >= static_cast<int>(shards_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("no shard ", shard, " in process"));
    }
    auto link = std::make_unique<Link>();
    link->channel = this;
    link->shard = shard;
    for (int32_t id : ids)
      link_of_partition_[id] = static_cast<int>(links_.size());
    links_.push_back(std::move(link));
  }
  for (auto& link : links_) {
    Link* raw = link.get();
    link->thread = std::thread([this, raw] { Serve(raw); });
  }
  return arrivals_.WaitForAll(absl::Now() + options_.connect_timeout);
}

void LocalParameterChannel::Push(int32_t id, int64_t step, int64_t samples,
                                 const float* grads, bool stop,
                                 PushRange range) {
  Enqueue({id, step, samples, grads, stop, range});
}

void LocalParameterChannel::PushShares(int32_t id, int64_t step,
                                       int64_t samples, const float* grads,
                                       bool stop,
                                       absl::Span<const MemberShare> shares) {
  Enqueue({id, step, samples, grads, stop, PushRange{}, shares});
}

void LocalParameterChannel::Enqueue(const QueuedPush& push) {
  Link* link = links_[link_of_partition_[push.id]].get();
  absl::MutexLock lock(&link->mu);
  link->queue.push_back(push);
}

void LocalParameterChannel::Serve(Link* link) {
  WorkerStream::Options options;
  options.cancelled = [link] { return link->Stopped(); };
  StreamHello hello{options_.job_id, options_.worker_id, options_.generation};
  for (const GroupPeer& peer : options_.pushes_for)
    hello.group.push_back(peer.worker_id);
  // The shard may not have the job or the generation yet: retry as the
  // gRPC channel re-opens a stream.
  const absl::Time until = absl::Now() + options_.reconnect_timeout;
  absl::StatusOr<std::unique_ptr<WorkerStream>> stream;
  for (;;) {
    stream = WorkerStream::Open(*shards_[link->shard], hello, options, link);
    const absl::StatusCode code = stream.status().code();
    if (stream.ok() || link->Stopped() || absl::Now() >= until ||
        (code != absl::StatusCode::kUnavailable &&
         code != absl::StatusCode::kNotFound))
      break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!stream.ok()) return arrivals_.Fail(stream.status());
  const int64_t chunk_elems = options_.chunk_bytes / 4;
  std::vector<QueuedPush> batch;
  for (;;) {
    {
      absl::MutexLock lock(&link->mu);
      link->mu.Await(absl::Condition(
          +[](Link* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu) {
            return !l->queue.empty() || l->closing || l->cancelled;
          },
          link));
      if (link->queue.empty()) return;  // closing
      batch.swap(link->queue);
    }
    PushChunk c;  // reused: the shares set per push, the rest per chunk
    for (const QueuedPush& item : batch) {
      const Partition& p = layout_->partitions()[item.id];
      c.shares.clear();
      for (const MemberShare& share : item.shares) {
        c.shares.push_back(
            {share.samples,
             share.samples > 0 ? DataRange{share.range.chunk,
                                           share.range.begin,
                                           share.range.end}
                               : DataRange{}});
      }
      absl::Status failed;
      ForEachChunk(p, item.samples, chunk_elems, [&](int64_t offset, int64_t n) {
        c.step = item.step;
        c.partition = item.id;
        c.offset = offset;
        c.samples = item.samples;
        c.data = Payload();
        c.indices = {};
        if (n > 0) {
          const GradientEncoder::Chunk e =
              encoder_->Encode(item.id, offset, n, item.grads, item.step,
                               options_.generation);
          c.data = Payload(e.data, e.bytes, encoder_->encoding());
          c.indices = e.indices;
        }
        c.stop = item.stop;
        c.range = item.samples > 0 && item.shares.empty()
                      ? DataRange{item.range.chunk, item.range.begin,
                                  item.range.end}
                      : DataRange{};
        c.largest = 0.0f;  // ValidatePush's, and generation the stream's
        failed = (*stream)->Push(c);
        return failed.ok();
      });
      if (!failed.ok()) {
        // After Close or Cancel the waits have ended already.
        if (!link->Stopped()) arrivals_.Fail(failed);
        return;
      }
    }
    batch.clear();
  }
}

absl::Status LocalParameterChannel::WaitForClock(
    int64_t clock, absl::Time deadline, bool* stop,
    absl::FunctionRef<void(int32_t)> arrived) {
  return arrivals_.WaitForClock(clock, deadline, stop, arrived);
}

void LocalParameterChannel::Cancel() {
  arrivals_.Cancel();
  for (auto& link : links_) {
    absl::MutexLock lock(&link->mu);
    link->cancelled = true;
  }
}

absl::Status LocalParameterChannel::Close() {
  for (auto& link : links_) {
    absl::MutexLock lock(&link->mu);
    link->closing = true;
  }
  for (auto& link : links_) {
    if (link->thread.joinable()) link->thread.join();
  }
  links_.clear();
  return arrivals_.error();
}

}  // namespace fulcrum
