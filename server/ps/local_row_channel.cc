#include "server/ps/local_row_channel.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::StatusOr<std::shared_ptr<JobShard>> LocalRowChannel::Job(
    int shard) const {
  if (shard < 0 || shard >= static_cast<int>(shards_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no shard ", shard));
  }
  return shards_[shard]->Find(options_.job_id);
}

void LocalRowChannel::Pull(const RowPullCall& call,
                           std::function<void(absl::Status)> done) {
  absl::StatusOr<std::shared_ptr<JobShard>> job = Job(call.shard);
  if (!job.ok()) return done(job.status());
  std::vector<float> rows;
  absl::Status s = (*job)->PullRows(options_.worker_id, options_.generation,
                                    *call.table, call.ids, &rows, call.step,
                                    call.deadline);
  if (s.ok() && rows.size() != call.ids.size() * call.dim) {
    s = absl::InternalError("the table's dim is not the caller's");
  }
  if (s.ok() && !rows.empty()) {
    std::memcpy(call.out, rows.data(), rows.size() * sizeof(float));
  }
  done(s);
}

void LocalRowChannel::Push(const RowPushCall& call,
                           std::function<void(absl::Status)> done) {
  absl::StatusOr<std::shared_ptr<JobShard>> job = Job(call.shard);
  if (!job.ok()) return done(job.status());
  RowsPush push;
  push.table = *call.table;
  push.generation = options_.generation;
  push.step = call.step;
  push.chunk = call.chunk;
  push.chunks = call.chunks;
  push.ids = call.ids;
  push.gradients = reinterpret_cast<const char*>(call.gradients.data());
  push.gradient_bytes = call.gradients.size() * sizeof(float);
  push.counts = call.counts;
  done((*job)->PushRows(options_.worker_id, push).status());
}

}  // namespace fulcrum
