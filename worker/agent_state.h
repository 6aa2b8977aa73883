// What a worker process is doing about jobs - one phase instead of a set of
// flags - and how the coordinator's heartbeat answers move it. Network-free
// and clock-free (times are passed in), so every transition is unit-tested
// (agent_state_test.cc); WorkerAgent does the RPCs and the threads.
//
//   kIdle ──offer──▶ kOffered ──Take──▶ kPreparing ──Prepared──▶ kPrepared
//     ▲                                                              │
//     │                 an assignment (any phase) is queued; Take ◀──┘
//     │                 starts it: ──▶ kTraining ──cancelled/lost──▶ kLeaving
//     └──────────────────────── Finished ◀──────────────────────────────┘
//
// Thread safety: none; WorkerAgent guards it with its mutex.
#ifndef FULCRUM_WORKER_AGENT_STATE_H_
#define FULCRUM_WORKER_AGENT_STATE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fulcrum/v1/coordinator.pb.h"

namespace fulcrum {

class AgentState {
 public:
  enum class Phase {
    kIdle,       // no job
    kOffered,    // a running job offered a place: its data is to be loaded
    kPreparing,  // loading it
    kPrepared,   // loaded (or not): says so until the generation with it
    kTraining,   // training job() at generation()
    kLeaving,    // the job was cancelled, failed elsewhere or forgot us
  };
  // Work for the training loop.
  struct Work {
    // kEnded: the job this worker waited for (not a member yet) ended
    // without it; the assignment holds the job and its final state. A
    // worker registered for that one job has nothing more to wait for.
    enum class Kind { kPrepare, kTrain, kEnded };
    Kind kind;
    v1::WorkerAssignment assignment;
  };

  Phase phase() const { return phase_; }
  // The offer (kOffered .. kPrepared) or the job being trained.
  const v1::WorkerAssignment& job() const { return job_; }
  int64_t generation() const { return generation_; }
  bool has_work() const;
  bool leaving() const { return phase_ == Phase::kLeaving; }

  // The job fields of the next heartbeat (job, generation, prepared_job,
  // prepare_error).
  void FillHeartbeat(v1::WorkerHeartbeatRequest* request) const;
  // Prepared: the generation that takes the worker in comes within a
  // round, so it asks often until `fast_poll_until`.
  bool FastPoll(absl::Time now) const;

  // A heartbeat's answer. Returns true when the training loop has something
  // new (work, a new generation, a cancellation).
  bool OnAnswer(const v1::WorkerAssignment& a);
  // The coordinator forgot the worker (its lease expired): a job being
  // trained is gone; the worker registers again under a new id, which may
  // join that job again.
  void OnForgotten();

  // The training loop takes the next work: a queued assignment first, then
  // a job that ended while this worker waited for it, then an offer to
  // prepare.
  std::optional<Work> Take();
  // The offer's data loaded (or failed to) at `now`.
  void Prepared(const std::string& job_id, const absl::Status& status,
                absl::Time now);
  // The trained job's next generation, if one was seen after `generation`.
  std::optional<v1::WorkerAssignment> TakeNextGeneration(
      const std::string& job_id, int64_t generation);
  // The worker ended its part in the job being trained.
  void Finished();

 private:
  void Offer(const v1::WorkerAssignment& a);

  Phase phase_ = Phase::kIdle;
  v1::WorkerAssignment job_;
  int64_t generation_ = 0;  // kTraining, kLeaving
  std::string prepare_error_;  // kPrepared
  absl::Time fast_poll_until_ = absl::InfinitePast();  // kPrepared
  // An assignment waiting for the training loop.
  std::optional<v1::WorkerAssignment> assigned_;
  // A job that ended while this worker waited to be taken in.
  std::optional<v1::WorkerAssignment> ended_;
  // kTraining: a newer generation of the job, for the trainer to re-join.
  std::optional<v1::WorkerAssignment> next_generation_;
  std::string finished_job_;  // the last job this worker ended its part in
  bool forgotten_ = false;    // the coordinator dropped it while training
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_AGENT_STATE_H_
