// A worker's embedding rows for one job generation (docs/embeddings.md):
// a batch's pulls and pushes split by shard (common/embedding/placement.h),
// duplicate ids pulled once and their gradients summed, each shard's part
// cut into requests of at most chunk_bytes, every shard's requests in
// flight at once through a RowChannel, and UNAVAILABLE and NOT_FOUND answers
// (a shard down, or restarted and not yet holding the job again) retried
// with backoff until the call's timeout (a repeated push is harmless: the
// shard acknowledges it without applying it again). Callers check the table
// against the job's spec first: an unknown table is retried too. No gRPC
// types.
//
// Thread safety: Pull and Push may be called concurrently (different
// tables, or a prefetch beside a push); the channel must allow it.
#ifndef FULCRUM_WORKER_ROW_CLIENT_H_
#define FULCRUM_WORKER_ROW_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/dataplane/row_channel.h"
#include "common/embedding/sparse_batch.h"

namespace fulcrum {

class RowClient {
 public:
  struct Options {
    int shards = 1;
    int64_t chunk_bytes = 1 << 20;  // the job's chunk_bytes
    absl::Duration timeout = absl::Seconds(60);  // per Pull / Push
    absl::Duration first_backoff = absl::Milliseconds(20);
    absl::Duration max_backoff = absl::Seconds(1);
  };
  // Requests at most this many chunks per shard and step (the shard's
  // bound).
  static constexpr int kMaxChunks = 64;

  // `channel` is not owned and must outlive the client.
  RowClient(RowChannel* channel, Options options);

  // Rows of `ids` (repeats allowed) of `table` (rows of `dim` floats) into
  // out[ids.size() x dim], in order. `step`: the reader's step (a table
  // with a staleness bound waits for the others); < 0: no wait.
  absl::Status Pull(const std::string& table, int dim,
                    absl::Span<const uint64_t> ids, float* out,
                    int64_t step = -1);

  // The step's row gradients: grads[ids.size() x dim], repeats summed here
  // (each occurrence counts once towards admission). Every shard hears of
  // the step, with no ids where it holds none (its clock for the table).
  absl::Status Push(const std::string& table, int dim, int64_t step,
                    absl::Span<const uint64_t> ids,
                    absl::Span<const float> grads);
  // The same, already summed.
  absl::Status Push(const std::string& table, int64_t step,
                    const SparseBatch& batch);
  // The same, already summed, as views: distinct ids, their counts and
  // grads[ids.size() x dim] (INVALID_ARGUMENT naming the one that
  // disagrees in size).
  absl::Status PushSummed(const std::string& table, int dim, int64_t step,
                          absl::Span<const uint64_t> ids,
                          absl::Span<const uint32_t> counts,
                          absl::Span<const float> grads);

 private:
  // Runs `calls` (indices into the caller's requests) through `issue`,
  // waits, and re-issues the UNAVAILABLE ones with backoff until the
  // deadline. The first other error ends it.
  absl::Status RunAll(int n, absl::Time deadline,
                      const std::function<void(int, std::function<void(
                                                        absl::Status)>)>& issue);

  RowChannel* const channel_;  // Not owned.
  const Options options_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_ROW_CLIENT_H_
