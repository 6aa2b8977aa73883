// gRPC front of the parameter shard: unpacks requests, calls ParameterShard,
// JobShard and WorkerStream, converts statuses. No training logic lives
// here; the stream's rules are WorkerStream's. The data-plane method
// (Stream) reads and writes common/dataplane/grpc_frames.h's frames - the
// protobuf messages with their tensor bytes out of line - so that pushes
// are reduced straight from the slices they arrived in. A worker on this
// host may offer a shared-memory segment in its hello; the stream then
// carries only control, and payloads lie in the segment (MapSegment).
#ifndef FULCRUM_SERVER_PS_SERVICE_H_
#define FULCRUM_SERVER_PS_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/dataplane/grpc_frames.h"
#include "common/dataplane/shm_segment.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"
#include "server/ps/parameter_shard.h"
#include "common/concurrency/watchdog.h"
#include "common/net/member_credential.h"
#include "server/ps/shard_metrics.h"
#include "server/ps/worker_stream.h"

namespace fulcrum {

class ParameterServerService final : public v1::ParameterServer::Service {
 public:
  friend class StreamReactor;  // the callback Stream: hello, segment, admission

  struct Options {
    // Longest a stream waits for the other workers of a step before giving
    // up with DEADLINE_EXCEEDED.
    absl::Duration step_timeout = absl::Minutes(5);
    // Not owned (it must outlive the service); when null the service keeps
    // its own (unexported) metrics.
    ShardMetrics* metrics = nullptr;
    // Bounds on what a peer can hold: streams (Stream, Initialize) at once
    // - one more is RESOURCE_EXHAUSTED -, the time to a stream's first
    // message, and the time a stream may wait for its next message (not
    // counting a read's wait for the other workers, which step_timeout
    // bounds). Past a deadline the stream is cancelled and what it held freed.
    // Not owned, may be null (nothing checked: tests): the coordinator's
    // credential as the shard learned it. Then InitJob, Reconfigure, EndJob
    // and Pull must carry it, and a hello or Initialize the worker's
    // StreamCredential derived from it (PERMISSION_DENIED otherwise).
    const SharedCredential* coordinator = nullptr;
    int max_streams = 1024;
    absl::Duration hello_timeout = absl::Seconds(10);
    absl::Duration idle_timeout = absl::Minutes(10);
    // Map the shared-memory segment a hello offers (a worker on this
    // host); false: every stream stays on TCP.
    bool shared_memory = true;
    // Serve Stream on gRPC's callback API (stream_reactor.h: no thread
    // per TCP stream) instead of a synchronous handler thread per stream.
    bool callback_streams = true;
  };

  // `shard` is not owned and must outlive the service.
  ParameterServerService(ParameterShard* shard, Options options);
  // Shut the server down first. Waits (at most 10 s) for the callback
  // streams gRPC has not finished with yet: their OnDone may come after
  // grpc::Server::Shutdown returns.
  ~ParameterServerService() override;

  grpc::Status InitJob(grpc::ServerContext* context,
                       const v1::InitJobRequest* request,
                       v1::InitJobResponse* response) override;
  grpc::Status EndJob(grpc::ServerContext* context,
                      const v1::EndJobRequest* request,
                      v1::EndJobResponse* response) override;
  // ParameterServer.Stream, registered in place of the generated handler.
  grpc::Status StreamFrames(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<ResponseFrame, RequestFrame>* stream);
  grpc::Status Reconfigure(grpc::ServerContext* context,
                           const v1::ReconfigureRequest* request,
                           v1::ReconfigureResponse* response) override;
  grpc::Status Pull(grpc::ServerContext* context,
                    const v1::PullRequest* request,
                    grpc::ServerWriter<v1::Params>* writer) override;
  grpc::Status Initialize(grpc::ServerContext* context,
                          grpc::ServerReader<v1::InitializeRequest>* reader,
                          v1::InitializeResponse* response) override;

  // Embedding rows (service_embeddings.cc).
  grpc::Status SparsePull(grpc::ServerContext* context,
                          const v1::SparsePullRequest* request,
                          v1::SparsePullResponse* response) override;
  grpc::Status SparsePush(grpc::ServerContext* context,
                          const v1::SparsePushRequest* request,
                          v1::SparsePushResponse* response) override;
  grpc::Status ExportRows(grpc::ServerContext* context,
                          const v1::ExportRowsRequest* request,
                          grpc::ServerWriter<v1::RowsPage>* writer) override;

  // Streams open now (tests, the gauge).
  int open_streams() const { return open_streams_.load(); }

 private:
  // Maps the segment `hello` offers (checks: shm_segment.h) and lays out a
  // parameter slot for each partition held here in *slots (bytes from the
  // region's start, by partition id). Null when shared memory is off or a
  // check fails: logged, counted in shm_streams_total, the stream stays on
  // TCP.
  std::unique_ptr<ShmSegment> MapSegment(const v1::Hello& hello,
                                         std::vector<int64_t>* slots);
  // A data-plane stream: the hello (AdmitHello), the segment, the
  // WorkerStream, then ServePushes until the worker half-closes.
  absl::Status ServeStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<ResponseFrame, RequestFrame>* stream,
      Watchdog::Deadline* deadline);
  // The hello's credentials - the worker's and each group member's - as
  // the WorkerStream's hello; PERMISSION_DENIED naming the worker.
  absl::StatusOr<StreamHello> AdmitHello(const v1::Hello& hello) const;
  // The read loop: every push message (with its more[]) into `worker`,
  // payloads from the message or `segment` (may be null). `next` reads the
  // next message - from the gRPC stream, or from the segment's request
  // ring (StreamRings) - false at the worker's half-close; `cancelled()`:
  // the call was (its end: the idle deadline passed).
  absl::Status ServePushes(
      absl::FunctionRef<bool()> cancelled, Watchdog::Deadline* deadline,
      const ShmSegment* segment, WorkerStream& worker,
      absl::FunctionRef<absl::StatusOr<bool>(RequestFrame*)> next);
  absl::Status ServeInitialize(grpc::ServerContext* context,
                               grpc::ServerReader<v1::InitializeRequest>* reader,
                               Watchdog::Deadline* deadline);
  absl::Status ServeSparsePull(const grpc::ServerContext& context,
                               const v1::SparsePullRequest& r,
                               v1::SparsePullResponse* response);
  absl::Status ServeSparsePush(const v1::SparsePushRequest& r,
                               v1::SparsePushResponse* response);
  // The call comes from the coordinator / the stream is worker_id's.
  absl::Status FromCoordinator(const grpc::ServerContext& context) const;
  absl::Status AsWorker(const std::string& job_id, const std::string& worker_id,
                        const std::string& credential) const;
  // Admits one more stream (RESOURCE_EXHAUSTED past max_streams) and arms
  // its `deadline` (the hello's first; not owned, it must outlive Leave)
  // with `expire` (the watchdog's contract: quick, on its thread); *watch
  // is its watchdog entry. Leave() undoes it.
  absl::Status Admit(const Watchdog::Deadline* deadline,
                     std::function<void()> expire, uint64_t* watch);
  void Leave(uint64_t watch);
  // The stream may wait this long for its next message from now: an
  // atomic store per message, no lock on the gradient path.
  static void Idle(Watchdog::Deadline* d, absl::Duration timeout) {
    d->Set(absl::Now() + timeout);
  }
  static void Busy(Watchdog::Deadline* d) { d->Set(absl::InfiniteFuture()); }

  ParameterShard* const shard_;  // Not owned.
  const Options options_;
  std::unique_ptr<metrics::Registry> own_registry_;
  std::unique_ptr<ShardMetrics> own_metrics_;
  ShardMetrics* metrics_;
  std::atomic<int> open_streams_{0};
  std::atomic<int> reactors_{0};  // StreamReactors alive
  Watchdog watchdog_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_SERVICE_H_
