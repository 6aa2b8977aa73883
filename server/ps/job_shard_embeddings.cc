// JobShard's embedding rows: the member checks in front of EmbeddingTables.
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "server/ps/job_shard.h"

namespace fulcrum {

absl::Status JobShard::PullRows(const std::string& worker_id,
                                int64_t generation, std::string_view table,
                                absl::Span<const uint64_t> ids,
                                std::vector<float>* out) const {
  RETURN_IF_ERROR(MemberIndex(worker_id, generation).status());
  return embeddings_->Pull(table, ids, out);
}

absl::StatusOr<RowsPushed> JobShard::PushRows(const std::string& worker_id,
                                              const RowsPush& push) {
  if (ended()) {
    return absl::AbortedError(
        absl::StrCat("job ", init_.job_id, " ended"));
  }
  RETURN_IF_ERROR(MemberIndex(worker_id, push.generation).status());
  return embeddings_->Push(worker_id, push);
}

int64_t JobShard::ExpireRows() {
  int64_t n = 0;
  for (const auto& table : embeddings_->tables()) n += table->Expire();
  return n;
}

}  // namespace fulcrum
