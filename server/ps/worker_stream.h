// One worker's data-plane stream with one job on this shard, without the
// transport: the hello's admission, the initial parameters, the pushes, and
// when and what to answer each read - the consistency mode's rule, which
// lives here and not in a service. The gRPC service (service.cc) and the
// in-process channel (local_channel.h) are two transports driving it.
//
// A read is answered once the worker has pushed its whole share of step t
// (every partition held here): sync sends each partition as soon as its
// version t + 1 exists, in the order the worker completed them, so the
// worker starts applying while the shard still aggregates; ssp/async send
// every partition at its current values once the ClockTable's bound
// allows.
//
// Thread safety: one thread at a time drives a WorkerStream (the stream's
// handler, or the callback service's reactions and the wait callbacks that
// continue its answers); CancelAnswer may run beside a pending answer.
#ifndef FULCRUM_SERVER_PS_WORKER_STREAM_H_
#define FULCRUM_SERVER_PS_WORKER_STREAM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/dataplane/payload.h"
#include "server/ps/job_shard.h"
#include "server/ps/parameter_shard.h"
#include "server/ps/shard_metrics.h"

namespace fulcrum {

// A run of parameters on its way to the worker.
struct ParamsHeader {
  int32_t partition = 0;
  int64_t offset = 0;  // elements from the partition start
  int64_t count = 0;   // elements
  int64_t version = 0;
  int64_t clock = 0;  // the step the reader may compute next
  bool stop = false;  // a worker asked to stop: the final version
  // How the values travel (the job's wire.parameters; Pull: fp32).
  WireEncoding encoding = WireEncoding::kFp32;
  // Another Send follows without a wait in between: the writer may hold
  // this one and send both in one message (one wake-up of the reader).
  // Never set on the last Send before a wait or the end.
  bool more = false;
};

// Where a run's values go: `data`, filled with `count` elements in
// `encoding`.
struct ParamsRoom {
  char* data = nullptr;
  WireEncoding encoding = WireEncoding::kFp32;
};

// The transport's half of a stream: where parameters go.
class ParamsWriter {
 public:
  virtual ~ParamsWriter() = default;
  // Room for `count` elements of `partition` at `offset`, to travel in
  // `encoding`; filled by the caller and then passed on by Send (a
  // message's buffer, the worker's slot in shared memory, or the worker's
  // own parameter buffer in process: no copy in between). The room says
  // which encoding the caller writes: `encoding`, narrowed straight from
  // the shard's parameters (one pass), or fp32 for a writer that converts
  // the values itself.
  virtual ParamsRoom Reserve(int32_t partition, int64_t offset, int64_t count,
                             WireEncoding encoding) = 0;
  // Sends what Reserve returned. false: the peer is gone.
  virtual bool Send(const ParamsHeader& header) = 0;
};

struct StreamHello {
  std::string job_id;
  std::string worker_id;
  int64_t generation = 0;
  // Local pre-reduction: the other members whose gradients this stream's
  // pushes carry summed with worker_id's (their credentials were checked
  // by the transport). Empty: worker_id's alone.
  std::vector<std::string> group;
};

// The most members a hello's group may name (a host's workers).
inline constexpr size_t kMaxGroup = 64;

// Sends every chunk of each partition in `ids` (all held here when empty)
// at its current values, clock = version: what Pull serves.
// INVALID_ARGUMENT naming the partition when one is not held here. Counts
// the bytes in `pulled` (not owned; may be null).
absl::Status SendPartitions(JobShard& job, std::vector<int32_t> ids,
                            ParamsWriter* writer,
                            metrics::Counter* pulled = nullptr);

class WorkerStream {
 public:
  struct Options {
    // Longest a read waits for the other workers of a step.
    absl::Duration step_timeout = absl::Minutes(5);
    // Not owned; may be null (no metrics).
    ShardMetrics* metrics = nullptr;
    // The transport gave up on the stream; may be null.
    std::function<bool()> cancelled;
  };

  // Admits the hello - NOT_FOUND (unknown job), FAILED_PRECONDITION (ended;
  // a group in a job that is not sync), INVALID_ARGUMENT (a group naming a
  // worker twice, or more than kMaxGroup), or JobShard::MemberIndex's codes
  // for any member - and sends the current values of every
  // partition held here through `writer` (not owned; must outlive the
  // stream).
  static absl::StatusOr<std::unique_ptr<WorkerStream>> Open(
      ParameterShard& shard, const StreamHello& hello, Options options,
      ParamsWriter* writer);
  // ssp/async: the member stopped training; reads stop waiting for it.
  ~WorkerStream();

  // One chunk of the worker's gradient (generation: the stream's; with a
  // group, the sum of the group's, chunk.shares one per member in the
  // hello's order: INVALID_ARGUMENT naming push.shares otherwise). Once the
  // worker has pushed its whole share of a step, answers its read of the
  // next step (blocking until the mode allows it, the deadline passes or
  // the transport cancels). A rejected chunk changes nothing and ends the
  // stream with its status.
  absl::Status Push(PushChunk chunk);

  // Push for a caller that must not block (the callback service,
  // stream_reactor.h): applies the chunk and, when it completed the
  // worker's share of a step, starts answering the read. Returns with
  // *pending false once the answer is sent (or none was due); with
  // *pending true while it waits for the other workers: `answered` then
  // runs exactly once with its outcome, on the thread whose change let it
  // go on (after that thread released its locks). No other call on the
  // stream until then, but CancelAnswer. An error before any wait is
  // returned (`answered` never runs).
  absl::Status PushAsync(PushChunk chunk,
                         std::function<void(absl::Status)> answered,
                         bool* pending);
  // Ends a pending answer with `code` (DEADLINE_EXCEEDED: the caller's
  // step_timeout passed; CANCELLED) and a message saying what it waited
  // for. True: it was waiting and `answered` will not run (the caller
  // takes the status from *why). False: `answered` runs or ran with an
  // outcome of its own (the continuation sees the cancel at its next wait
  // and ends with it then). A cancel is final: an answer that starts after
  // it (a cancel that came before PushAsync) ends with it at its first
  // wait.
  bool CancelAnswer(absl::StatusCode code, absl::Status* why);

  JobShard& job() { return *job_; }

 private:
  // The worker's chunk applied (metrics, the job, completed_): the clock
  // whose read is now due, or nullopt.
  absl::StatusOr<std::optional<int64_t>> Accept(PushChunk chunk);
  // PushAsync's answer, run until it waits or ends: true when it ended
  // (with *result), false when a wait's callback will go on.
  bool ContinueAnswer(absl::Status* result);
  // A wait's callback: go on, and report the end.
  void Resumed(absl::Status s);
  // The clock table allowed the answer's read (its staleness).
  void ReadDone(int64_t staleness);
  // Why a wait for the current answer ended early, as CancelAnswer says.
  absl::Status WaitEnded(absl::StatusCode code) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(answer_mu_);
  WorkerStream(std::shared_ptr<JobShard> job, std::vector<int> members,
               int64_t generation, Options options, ParamsWriter* writer);
  // Every chunk of `partition`'s current values; clock < 0: its version.
  // more: another partition follows at once (ParamsHeader::more).
  absl::Status SendPartition(int32_t partition, int64_t clock,
                             bool more = false);
  // Every partition held here at `clock`, in one batch (each but the
  // last marked `more`).
  absl::Status SendAll(int64_t clock);
  // Sync: whether completed_[i + 1] is at `clock` already (the partition
  // before it may be held for the same message).
  bool NextReady(size_t i, int64_t clock);
  absl::Status AnswerRead(int64_t clock);

  const std::shared_ptr<JobShard> job_;
  // The hello's worker, then its group's, as member indices.
  const std::vector<int> members_;
  const int64_t generation_;
  const Options options_;
  ParamsWriter* const writer_;  // Not owned.
  const WireEncoding params_encoding_;  // the job's wire.parameters
  ShardMetrics::Job metrics_{};  // all null without metrics
  // Partitions this worker completed for completing_step_, in completion
  // order (one completed earlier on a broken stream counts too).
  std::vector<int32_t> completed_;
  int64_t completing_step_ = -1;

  // The answer PushAsync is giving (one at a time).
  struct Answer {
    int64_t clock = 0;
    size_t next = 0;           // sync: completed_[next] is the next to send
    bool read_done = false;    // the clock table's read has returned
    absl::Time wait_started;
    absl::Duration waited;
    std::function<void(absl::Status)> answered;
  } answer_;
  // Guards what CancelAnswer and a wait's callback both touch.
  absl::Mutex answer_mu_;
  enum class Waiting { kNone, kVersion, kRead };
  Waiting waiting_ ABSL_GUARDED_BY(answer_mu_) = Waiting::kNone;
  int32_t waiting_partition_ ABSL_GUARDED_BY(answer_mu_) = -1;
  uint64_t wait_id_ ABSL_GUARDED_BY(answer_mu_) = 0;
  // Set by a CancelAnswer that found no wait to remove; never cleared.
  absl::Status cancelled_ ABSL_GUARDED_BY(answer_mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_WORKER_STREAM_H_
