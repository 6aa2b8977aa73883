// The worker's side of embedding rows as an interface: one call to one
// shard at a time, asynchronous, so that a client can have a request in
// flight to every shard at once (TensorFlow's WorkerInterface). Transports
// plug in here:
//   GrpcRowChannel (worker/grpc_row_channel.h)  SparsePull/SparsePush;
//   LocalRowChannel (server/ps/local_row_channel.h, tests)  the shard core
//       in process.
// RowClient (worker/row_client.h) splits a batch's rows by shard, sums
// duplicates, chunks and retries over it.
//
// Errors follow docs/errors.md: ABORTED (the generation ended: re-join),
// UNAVAILABLE (retry), DEADLINE_EXCEEDED, INVALID_ARGUMENT / NOT_FOUND (a
// bad request: not retried).
//
// Thread safety: calls may be made from any thread, concurrently; `done`
// runs on a transport thread (or inline) exactly once.
#ifndef FULCRUM_COMMON_DATAPLANE_ROW_CHANNEL_H_
#define FULCRUM_COMMON_DATAPLANE_ROW_CHANNEL_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace fulcrum {

// A pull of rows all held by `shard`. Nothing is owned: every pointer must
// stay valid until `done` ran.
struct RowPullCall {
  int shard = 0;
  const std::string* table = nullptr;
  absl::Span<const uint64_t> ids;
  float* out = nullptr;  // ids.size() x dim floats
  int dim = 0;
  // The reader's step: a table with a staleness bound waits for the
  // others (docs/embeddings.md); < 0: no wait.
  int64_t step = -1;
  absl::Time deadline = absl::InfiniteFuture();
};

// A push of distinct rows all held by `shard`: chunk `chunk` of `chunks`
// of the step's rows for that shard.
struct RowPushCall {
  int shard = 0;
  const std::string* table = nullptr;
  int64_t step = 0;
  int32_t chunk = 0;
  int32_t chunks = 1;
  absl::Span<const uint64_t> ids;
  absl::Span<const float> gradients;  // ids.size() x dim
  absl::Span<const uint32_t> counts;  // per id, or empty (1 each)
  absl::Time deadline = absl::InfiniteFuture();
};

class RowChannel {
 public:
  virtual ~RowChannel() = default;
  virtual void Pull(const RowPullCall& call,
                    std::function<void(absl::Status)> done) = 0;
  virtual void Push(const RowPushCall& call,
                    std::function<void(absl::Status)> done) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_DATAPLANE_ROW_CHANNEL_H_
