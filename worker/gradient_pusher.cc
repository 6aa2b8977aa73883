#include "worker/gradient_pusher.h"

namespace fulcrum {

GradientPusher::GradientPusher(Backend* backend, const ParameterLayout* layout,
                               WorkerSession* session, float* grads,
                               const float* grads_dev)
    : backend_(backend),
      layout_(layout),
      session_(session),
      grads_(grads),
      grads_dev_(grads_dev),
      host_(backend->HostAccessible()) {
  pending_.reserve(layout->partitions().size());
}

void GradientPusher::Begin(int64_t step, int64_t samples, bool stop,
                           PushRange range) {
  step_ = step;
  samples_ = samples;
  stop_ = stop;
  range_ = range;
  next_ = static_cast<int64_t>(layout_->partitions().size()) - 1;
  first_push_ = Clock::time_point();
  pending_.clear();
}

void GradientPusher::Ready(int64_t ready_from) {
  const std::vector<Partition>& parts = layout_->partitions();
  const int64_t first = next_;
  while (next_ >= 0 && parts[next_].offset >= ready_from) --next_;
  if (next_ == first) return;
  if (host_) return PushPartitions(first, next_ + 1);
  // Device: copy this bucket on the copy stream while backward goes on with
  // earlier layers; push it once it has arrived.
  const Partition& lo = parts[next_ + 1];
  const Partition& hi = parts[first];
  const int ticket =
      backend_->CopyToHostAsync(grads_dev_ + lo.offset, grads_ + lo.offset,
                                hi.offset + hi.size - lo.offset);
  pending_.push_back({ticket, first, next_ + 1});
}

absl::Status GradientPusher::Finish() {
  for (const PendingCopy& c : pending_) {  // in backward's order
    backend_->WaitCopy(c.ticket);
    PushPartitions(c.first, c.last);
  }
  pending_.clear();
  return backend_->status();
}

void GradientPusher::PushEmpty(int64_t step, bool stop) {
  Begin(step, 0, stop, {});
  for (int32_t id = static_cast<int32_t>(layout_->partitions().size()) - 1;
       id >= 0; --id) {
    session_->Push(id, step, 0, grads_, stop);
  }
}

void GradientPusher::PushPartitions(int64_t from, int64_t down_to) {
  if (first_push_ == Clock::time_point()) first_push_ = Clock::now();
  for (int64_t id = from; id >= down_to; --id) {
    session_->Push(static_cast<int32_t>(id), step_, samples_, grads_, stop_,
                   range_);
  }
}

}  // namespace fulcrum
