// JobShard's embedding rows: the member checks in front of EmbeddingTables.
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "server/ps/job_shard.h"

namespace fulcrum {

absl::Status JobShard::PullRows(const std::string& worker_id,
                                int64_t generation, std::string_view table,
                                absl::Span<const uint64_t> ids,
                                std::vector<float>* out, int64_t step,
                                absl::Time deadline,
                                const std::function<bool()>& cancelled) const {
  ASSIGN_OR_RETURN(const int member, MemberIndex(worker_id, generation));
  RowsRead read;
  read.member = member;
  read.step = step;
  read.generation = generation;
  read.deadline = deadline;
  if (cancelled) read.cancelled = cancelled;
  return embeddings_->Pull(table, ids, out, read);
}

absl::StatusOr<RowsPushed> JobShard::PushRows(const std::string& worker_id,
                                              const RowsPush& push) {
  if (ended()) {
    return absl::AbortedError(
        absl::StrCat("job ", init_.job_id, " ended"));
  }
  ASSIGN_OR_RETURN(const int member, MemberIndex(worker_id, push.generation));
  ASSIGN_OR_RETURN(RowsPushed pushed,
                   embeddings_->Push(worker_id, push, member));
  if (rows_only_ && pushed.row_clock_moved) MaybeCheckpointRows();
  return pushed;
}

void JobShard::MaybeCheckpointRows() {
  const int64_t every = init_.spec.checkpoint().every_steps();
  const int64_t clock = embeddings_->RowClock();
  if (clock == INT64_MAX || clock < every) return;
  const int64_t step = clock / every * every;
  absl::MutexLock serial(&clock_checkpoint_mu_);
  if (step <= clock_checkpoint_) return;
  clock_checkpoint_ = step;
  checkpointer_->Complete(step);
}

int64_t JobShard::ExpireRows() {
  int64_t n = 0;
  for (const auto& table : embeddings_->tables()) n += table->Expire();
  return n;
}

}  // namespace fulcrum
