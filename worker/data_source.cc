#include "worker/data_source.h"
#include "common/status/status_macros.h"

#include <algorithm>

namespace fulcrum {
namespace {

class StaticSource : public DataSource {
 public:
  StaticSource(const v1::JobSpec& spec, int64_t n, WorkerSession* session)
      : DataSource(spec, n, session) {}
  void StartGeneration() override {}
  int64_t StepLimit() const override { return TotalSteps(); }
  absl::StatusOr<StepSamples> Next(int64_t step) override {
    StepSamples s = Of(step);
    UseEpoch(s.epoch);
    return s;
  }
  std::optional<StepSamples> Peek(int64_t step) const override {
    StepSamples s = Of(step);
    if (s.epoch != epoch_loaded_) return std::nullopt;
    return s;
  }

 private:
  StepSamples Of(int64_t step) const {
    const Assignment& a = session_->assignment();
    const int64_t per_epoch =
        StepsPerEpoch(n_, a.world_size, spec_.batch_size());
    StepSamples s;
    s.epoch = step / per_epoch;
    s.share = WorkerShare(n_, step % per_epoch, a.rank, a.world_size,
                          spec_.batch_size());
    return s;
  }
};

class ChunkSource : public DataSource {
 public:
  ChunkSource(const v1::JobSpec& spec, int64_t n, WorkerSession* session)
      : DataSource(spec, n, session) {}

  void StartGeneration() override {
    lease_ = ChunkLease{};
    done_.clear();
    exhausted_ = false;
    next_poll_ = absl::InfinitePast();
  }
  // Until the data is exhausted (or max_steps).
  int64_t StepLimit() const override {
    return spec_.max_steps() > 0 ? spec_.max_steps() : INT64_MAX;
  }
  absl::StatusOr<StepSamples> Next(int64_t) override {
    if (lease_.chunk < 0 && !exhausted_ && absl::Now() >= next_poll_) {
      RETURN_IF_ERROR(Lease());
    }
    if (lease_.chunk >= 0) UseEpoch(lease_.epoch);
    const StepSamples samples = FromLease();
    if (lease_.chunk >= 0) {
      lease_.next += samples.share.count;
      if (lease_.next >= lease_.end) {
        done_.push_back(lease_.chunk);
        lease_ = ChunkLease{};
      }
    }
    return samples;
  }
  // Known while the lease lasts (Next asks for none).
  std::optional<StepSamples> Peek(int64_t) const override {
    if (lease_.chunk < 0 || lease_.epoch != epoch_loaded_) return std::nullopt;
    return FromLease();
  }

 private:
  // The next batch of the lease (none without one), order() loaded.
  StepSamples FromLease() const {
    StepSamples samples;
    if (lease_.chunk >= 0) {
      samples.share.begin = lease_.next;
      samples.share.count =
          std::min<int64_t>(spec_.batch_size(), lease_.end - lease_.next);
      samples.range = {lease_.chunk, lease_.next,
                       lease_.next + samples.share.count};
    }
    samples.epoch = std::max<int64_t>(epoch_loaded_, 0);
    samples.exhausted = exhausted_;
    return samples;
  }

  // Reports the finished chunks and leases the next one. The session waits
  // while the coordinator does not answer; ABORTED: the generation ended.
  absl::Status Lease() {
    ASSIGN_OR_RETURN(const std::optional<ChunkLease> got,
                     session_->LeaseChunk(done_, n_, &exhausted_));
    done_.clear();
    if (got.has_value()) {
      lease_ = *got;
    } else {
      // Others still train the last chunks (one may come back).
      next_poll_ = absl::Now() + absl::Milliseconds(20);
    }
    return absl::OkStatus();
  }

  ChunkLease lease_;
  std::vector<int64_t> done_;  // finished since the last lease call
  bool exhausted_ = false;
  absl::Time next_poll_ = absl::InfinitePast();
};

}  // namespace

DataSource::DataSource(const v1::JobSpec& spec, int64_t n,
                       WorkerSession* session)
    : spec_(spec), n_(n), session_(session) {
  order_.reserve(n);
}

std::unique_ptr<DataSource> DataSource::ForSpec(const v1::JobSpec& spec,
                                                int64_t dataset_size,
                                                WorkerSession* session) {
  if (spec.dataset().sharding() == "chunks")
    return std::make_unique<ChunkSource>(spec, dataset_size, session);
  return std::make_unique<StaticSource>(spec, dataset_size, session);
}

int64_t DataSource::TotalSteps() const {
  const int64_t per_epoch = StepsPerEpoch(
      n_, session_->assignment().world_size, spec_.batch_size());
  const int64_t last = per_epoch * spec_.epochs();
  return spec_.max_steps() > 0 ? std::min(last, spec_.max_steps()) : last;
}

void DataSource::UseEpoch(int64_t epoch) {
  if (epoch == epoch_loaded_) return;
  EpochOrder(spec_.seed(), epoch, n_, &order_);
  epoch_loaded_ = epoch;
}

}  // namespace fulcrum
