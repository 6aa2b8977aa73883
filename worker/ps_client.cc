#include "worker/ps_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/net/grpc_options.h"
#include "common/status/grpc_status.h"

namespace fulcrum {

struct PsClient::Stream {
  int shard = 0;
  std::unique_ptr<v1::ParameterServer::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>>
      rw;
  std::thread sender, receiver;
  struct Item {
    int32_t id;
    int64_t step;
    int64_t samples;
    const float* grads;
    bool stop;
  };
  absl::Mutex mu;
  std::vector<Item> queue ABSL_GUARDED_BY(mu);  // capacity reserved up front
  bool closing ABSL_GUARDED_BY(mu) = false;
  bool writes_done = false;  // sender thread only
};

PsClient::PsClient(Options options, const ParameterLayout* layout,
                   float* params)
    : options_(std::move(options)),
      layout_(layout),
      params_(params),
      chunk_elems_(options_.chunk_bytes / 4) {}

PsClient::~PsClient() {
  Cancel();
  Close().IgnoreError();
}

absl::StatusOr<int64_t> PsClient::Connect() {
  const size_t n = layout_->partitions().size();
  {
    absl::MutexLock lock(&mu_);
    clock_.assign(n, -1);
    received_.assign(n, 0);
    stop_.assign(n, 0);
  }
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
    s->stub = v1::ParameterServer::NewStub(
        MakeChannel(options_.shard_addresses[shard]));
    s->context.set_wait_for_ready(true);
    {
      absl::MutexLock lock(&s->mu);
      s->queue.reserve(ids.size() * 2);
    }
    for (int32_t id : ids)
      stream_of_partition_[id] = static_cast<int>(streams_.size());
    streams_.push_back(std::move(s));
  }
  for (auto& s : streams_) {
    s->rw = s->stub->Stream(&s->context);
    v1::StreamRequest hello;
    hello.mutable_hello()->set_job_id(options_.job_id);
    hello.mutable_hello()->set_worker_id(options_.worker_id);
    hello.mutable_hello()->set_generation(options_.generation);
    // A failed write means a failed stream: the receiver reports its status.
    s->rw->Write(hello);
    Stream* raw = s.get();
    s->receiver = std::thread([this, raw] { ReceiveLoop(raw); });
    s->sender = std::thread([this, raw] { SendLoop(raw); });
  }
  // Initial parameters: every partition answered, all at the same clock.
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (!error_.ok()) return error_;
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t v : clock_) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (lo >= 0) {
      if (lo != hi) {
        return absl::FailedPreconditionError(absl::StrCat(
            "shards disagree on the starting clock (", lo, " vs ", hi, ")"));
      }
      return lo;
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          "timed out waiting for initial parameters");
    }
  }
}

void PsClient::Push(int32_t id, int64_t step, int64_t samples,
                    const float* grads, bool stop) {
  Stream* s = streams_[stream_of_partition_[id]].get();
  absl::MutexLock lock(&s->mu);
  s->queue.push_back({id, step, samples, grads, stop});
}

void PsClient::SendLoop(Stream* s) {
  std::vector<Stream::Item> batch;
  batch.reserve(layout_->partitions().size());
  v1::StreamRequest request;
  v1::Push* push = request.mutable_push();
  for (;;) {
    {
      absl::MutexLock lock(&s->mu);
      s->mu.Await(absl::Condition(
          +[](Stream* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) {
            return !st->queue.empty() || st->closing;
          },
          s));
      if (s->queue.empty()) break;  // closing
      batch.swap(s->queue);
    }
    for (const Stream::Item& item : batch) {
      const Partition& p = layout_->partitions()[item.id];
      push->set_step(item.step);
      push->set_partition(item.id);
      push->set_samples(item.samples);
      push->set_stop(item.stop);
      push->set_encoding(v1::ENCODING_FP32);
      const int64_t size = item.samples == 0 ? 0 : p.size;
      int64_t offset = 0;
      do {
        const int64_t n = std::min(chunk_elems_, size - offset);
        push->set_offset(offset);
        push->mutable_data()->assign(
            reinterpret_cast<const char*>(item.grads + p.offset + offset),
            n * sizeof(float));
        if (!s->rw->Write(request)) return;  // the receiver reports the status
        offset += n;
      } while (offset < size);
    }
    batch.clear();
  }
  s->rw->WritesDone();
  s->writes_done = true;
}

void PsClient::ReceiveLoop(Stream* s) {
  v1::StreamResponse response;
  while (s->rw->Read(&response)) {
    const v1::Params& p = response.params();
    if (p.partition() < 0 ||
        p.partition() >= static_cast<int32_t>(clock_.size()) ||
        stream_of_partition_[p.partition()] < 0 ||
        streams_[stream_of_partition_[p.partition()]].get() != s) {
      Fail(absl::InternalError(absl::StrCat(
          "shard ", s->shard, " sent unknown partition ", p.partition())));
      s->context.TryCancel();
      break;
    }
    const Partition& part = layout_->partitions()[p.partition()];
    const int64_t n = p.data().size() / sizeof(float);
    if (p.offset() < 0 || p.offset() + n > part.size ||
        p.data().size() % sizeof(float) != 0) {
      Fail(absl::InternalError(absl::StrCat("shard ", s->shard,
                                            " sent a bad chunk of partition ",
                                            p.partition())));
      s->context.TryCancel();
      break;
    }
    std::memcpy(params_ + part.offset + p.offset(), p.data().data(),
                p.data().size());
    absl::MutexLock lock(&mu_);
    received_[p.partition()] += n;
    if (received_[p.partition()] >= part.size) {
      received_[p.partition()] = 0;
      clock_[p.partition()] = p.clock();
      stop_[p.partition()] = p.stop();
      changed_.SignalAll();
    }
  }
  grpc::Status status = s->rw->Finish();
  if (!status.ok()) {
    Fail(absl::Status(FromGrpcStatus(status).code(),
                      absl::StrCat("shard ", s->shard, " (",
                                   options_.shard_addresses[s->shard],
                                   "): ", status.error_message())));
  }
}

void PsClient::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = status;
  changed_.SignalAll();
}

absl::Status PsClient::WaitForClock(int64_t clock, absl::Time deadline,
                                    bool* stop) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (!error_.ok()) return error_;
    if (cancelled_) return absl::CancelledError("cancelled");
    bool all = true;
    for (int64_t v : clock_) all = all && v >= clock;
    if (all) break;
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("timed out waiting for the parameters of step ", clock));
    }
  }
  *stop = false;
  for (uint8_t s : stop_) *stop = *stop || s;
  return absl::OkStatus();
}

void PsClient::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    changed_.SignalAll();
  }
  for (auto& s : streams_) s->context.TryCancel();
}

absl::Status PsClient::Close() {
  for (auto& s : streams_) {
    absl::MutexLock lock(&s->mu);
    s->closing = true;
  }
  for (auto& s : streams_) {
    if (s->sender.joinable()) s->sender.join();
    if (s->receiver.joinable()) s->receiver.join();
  }
  streams_.clear();
  absl::MutexLock lock(&mu_);
  return error_;
}

}  // namespace fulcrum
