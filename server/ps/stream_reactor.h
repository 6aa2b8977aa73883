// ParameterServer.Stream on gRPC's callback API (fulcrum-server
// --stream_service=callback): no thread per stream. The synchronous
// handler (ParameterServerService::ServeStream) holds a thread for each
// stream, asleep in a gRPC Read or in a WorkerStream wait for the other
// workers, and every parameter message is a wake-up of that thread. Here a
// stream is a reactor: a push arrives as OnReadDone on one of gRPC's
// threads, WorkerStream::PushAsync applies it, and a read that must wait
// for the other workers is answered by the push that completes the step,
// on that push's thread (JobShard::OnVersion), straight into this stream's
// write queue - one outstanding gRPC write, the rest queued in order.
//
// The same frames, hello, admission and shared-memory segment as the
// synchronous handler (the segment's parameter slots, batched messages).
// A co-located worker's message rings need a thread to sleep on the ring:
// such a stream gets one (RingLoop, the synchronous handler's loop over
// the request ring), and the reactor only watches the gRPC stream's end.
//
// Deadlines: one Watchdog entry with a moving deadline - the hello's, then
// the idle one while a read is outstanding, then step_timeout while an
// answer waits. Past it a read is cancelled (TryCancel, as the synchronous
// handler does) and a waiting answer ends with DEADLINE_EXCEEDED naming
// what it waited for.
//
// Thread safety: gRPC runs reactions concurrently and a waiting answer
// goes on from another stream's thread; the write queue, the state and
// the end are under mu_. Processing a request (hello, pushes) happens on
// one thread at a time: the next read starts only once it is done.
// Ownership: gRPC holds the reactor until OnDone; it deletes itself once
// OnDone ran and no answer callback can still come.
#ifndef FULCRUM_SERVER_PS_STREAM_REACTOR_H_
#define FULCRUM_SERVER_PS_STREAM_REACTOR_H_

#include <grpcpp/support/server_callback.h>

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/concurrency/watchdog.h"
#include "common/dataplane/grpc_frames.h"
#include "common/dataplane/shm_ring.h"
#include "common/dataplane/shm_segment.h"
#include "server/ps/stream_frames.h"
#include "server/ps/worker_stream.h"

namespace fulcrum {

class ParameterServerService;

class StreamReactor final
    : public grpc::ServerBidiReactor<RequestFrame, ResponseFrame>,
      private FrameSink {
 public:
  // `service` and `context` are not owned; the service outlives its
  // streams (grpc::Server::Shutdown ends them first).
  StreamReactor(ParameterServerService* service,
                grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  ~StreamReactor() override;

  // FrameSink: queues a copy of the frame, starting the write if none is
  // outstanding.
  bool Write(const ResponseFrame& frame) override;
  // The hello (admission, segment, WorkerStream::Open) / the pushes of
  // request_ from next_push_ on. OK with *pending when an answer waits.
  absl::Status Hello();
  absl::Status Pushes(bool* pending);
  // Whatever request_ needed is done: read the next one.
  void NextRead();
  // A stream on rings: its thread reads the request ring (blocking pushes,
  // as the synchronous handler), then ends the stream.
  void RingLoop();
  // The ring thread's cancellation: the stream ended, or the call was
  // cancelled (the worker gone, the idle deadline).
  bool Stopped();
  // A waiting answer's end (WorkerStream's callback).
  void Answered(absl::Status s);
  // The watchdog's deadline passed (on its thread, under its lock: quick).
  void Expired();
  // Ends the stream with `s` once the write in flight is done (OK: once
  // every queued write is). Only the first call counts.
  void End(absl::Status s);
  void EndLocked(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OnDone ran and no other thread is in or will come into the reactor.
  bool DeletableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ && !answering_ && !processing_ && !ring_thread_;
  }

  ParameterServerService* const service_;
  grpc::CallbackServerContext* const context_;
  Watchdog::Deadline deadline_;
  uint64_t watch_ = 0;
  bool admitted_ = false;

  // The stream's parts, set up by the hello.
  RequestFrame request_;
  int next_push_ = 0;  // of request_ (PushAt's index)
  std::vector<int64_t> slots_;
  std::unique_ptr<ShmSegment> segment_;
  std::optional<StreamRings> rings_;
  // Set at the stream's end: the ring thread's waits stop (polled).
  std::atomic<bool> ring_stop_{false};
  std::unique_ptr<FrameParamsWriter> writer_;
  std::unique_ptr<WorkerStream> stream_;
  PushChunk chunk_;

  absl::Mutex context_mu_;
  bool context_gone_ ABSL_GUARDED_BY(context_mu_) = false;  // OnDone came

  absl::Mutex mu_;
  std::deque<std::unique_ptr<ResponseFrame>> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // queue_.front() in flight
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool answering_ ABSL_GUARDED_BY(mu_) = false;  // its callback will come
  // Answered goes on with the request on the callback's thread.
  bool processing_ ABSL_GUARDED_BY(mu_) = false;
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called
  bool done_ ABSL_GUARDED_BY(mu_) = false;      // OnDone ran
  bool ring_thread_ ABSL_GUARDED_BY(mu_) = false;  // RingLoop runs
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_STREAM_REACTOR_H_
