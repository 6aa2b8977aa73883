// The worker's side of the data plane: one bidirectional stream per shard
// for the life of a membership generation. A sender thread per stream pushes
// gradient partitions as backward produces them (so communication overlaps
// the rest of backward); a receiver thread per stream writes arriving
// parameters straight into the model's flat parameter buffer.
//
// A stream that breaks (UNAVAILABLE: a dropped connection, a restarting
// shard) is re-opened with bounded exponential backoff and jitter within
// `reconnect_timeout`: the shard answers the new hello with its current
// values, and the pushes of the current step are sent again (the shard
// acknowledges repeats without applying them twice). ABORTED (the
// generation ended) and other errors end the client's waits.
//
// Thread safety: Push*/WaitForClock are called from the training thread
// only; the internal threads are owned here (started in Connect, joined in
// Close or the destructor).
#ifndef FULCRUM_WORKER_PS_CLIENT_H_
#define FULCRUM_WORKER_PS_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor/layout.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"

namespace fulcrum {

// The samples behind a pushed gradient (chunk sharding; chunk < 0: none).
struct PushRange {
  int64_t chunk = -1, begin = 0, end = 0;
};

class PsClient {
 public:
  struct Options {
    std::string job_id;
    std::string worker_id;
    int64_t generation = 1;
    std::vector<std::string> shard_addresses;  // by shard index
    int64_t chunk_bytes = 1 << 20;
    absl::Duration connect_timeout = absl::Seconds(30);
    // How long a broken stream is retried before the client fails.
    absl::Duration reconnect_timeout = absl::Seconds(30);
    // Called (from a receiver thread) each time a broken stream re-opens.
    std::function<void()> on_reconnect;
    // Test hook: called with the stream's context before each (re)connect.
    std::function<void(grpc::ClientContext*)> configure_context;
  };

  // `layout` and `params` (layout.total_size() floats, host memory) are not
  // owned and must outlive the client.
  PsClient(Options options, const ParameterLayout* layout, float* params);
  ~PsClient();

  // Opens the streams and waits until every partition's current values have
  // arrived in `params`. Returns their clock: the step to compute next.
  absl::StatusOr<int64_t> Connect();

  // Queues the push of partition `id`'s gradient (read from `grads`, which
  // must stay unchanged until the next WaitForClock returns) for `step`.
  // samples = 0 sends an empty push (this worker had no data this step).
  // `range` (chunk < 0: none) names the samples behind the gradient.
  using Range = PushRange;
  void Push(int32_t id, int64_t step, int64_t samples, const float* grads,
            bool stop, Range range = {});

  // Waits until every partition has arrived for reading at `clock` (the
  // parameters to compute step `clock` with; in sync mode exactly version
  // `clock`). *stop is set when a worker asked everyone to stop.
  absl::Status WaitForClock(int64_t clock, absl::Time deadline, bool* stop);
  // The same, and calls `arrived(id)` on the calling thread for each
  // partition as soon as it has arrived (each once, in arrival order), so
  // that the caller can move it on (e.g. copy it to a GPU) while the rest
  // is still in flight.
  absl::Status WaitForClock(int64_t clock, absl::Time deadline, bool* stop,
                            absl::FunctionRef<void(int32_t)> arrived);

  // Half-closes the streams and collects their final status.
  absl::Status Close();

  // Makes waits return CANCELLED (e.g. the job was cancelled).
  void Cancel();

  // Streams re-opened after a failure, over the client's life.
  int64_t reconnects() const;

 private:
  struct Stream;
  struct Connection;
  void SendLoop(Stream* s);
  void ReceiveLoop(Stream* s);
  // Opens a stream to the shard and sends hello. The connection's context
  // is registered before the call so that Cancel() can reach it.
  std::shared_ptr<Connection> Open(Stream* s);
  void Fail(const absl::Status& status);

  const Options options_;
  const ParameterLayout* const layout_;  // Not owned.
  float* const params_;                  // Not owned.
  const int64_t chunk_elems_;
  std::vector<std::unique_ptr<Stream>> streams_;  // shards holding partitions
  std::vector<int> stream_of_partition_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::vector<int64_t> clock_
      ABSL_GUARDED_BY(mu_);  // per partition: last read answered
  std::vector<int64_t> received_
      ABSL_GUARDED_BY(mu_);  // elements of the next version
  std::vector<uint8_t> stop_ ABSL_GUARDED_BY(mu_);
  // WaitForClock's scratch (training thread only): partitions handed to
  // `arrived` / arrived but not handed yet.
  std::vector<uint8_t> handed_;
  std::vector<int32_t> ready_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_PS_CLIENT_H_
