// The worker process's control loop: registers with the coordinator,
// heartbeats (carrying the latest progress) from its own thread, waits for a
// job assignment, trains it with a Trainer, and reports the outcome. Then it
// is idle again and can be assigned the next job. Offered a place in a
// running job, it first loads the job's data and says so; the job then
// takes it in at its next generation.
#ifndef FULCRUM_WORKER_WORKER_AGENT_H_
#define FULCRUM_WORKER_WORKER_AGENT_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "worker/backend/backend.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace fulcrum {

class WorkerAgent : public ProgressSink {
 public:
  struct Options {
    std::string coordinator = "127.0.0.1:7070";
    std::string device = "cpu";
    int max_jobs = 0;  // exit after this many jobs; 0 = serve forever
    WorkerMetrics* metrics = nullptr;  // Not owned; may be null.
    double slowdown = 1.0;  // straggler injection (see Trainer::Options)
    absl::Duration step_delay = absl::ZeroDuration();
    absl::Duration step_delay_jitter = absl::ZeroDuration();
  };
  // `backend` is not owned and must outlive the agent.
  WorkerAgent(Options options, Backend* backend);
  ~WorkerAgent() override;

  // Serves until Shutdown() or max_jobs. Returns the process exit code.
  int Run();
  // Thread-safe; ends Run() at the next opportunity (a running job stops).
  void Shutdown();
  // Registered with the coordinator (for /readyz).
  bool Registered();

  void Update(const v1::Progress& progress) override;
  bool Cancelled() override;
  std::optional<Assignment> NextAssignment(const std::string& job_id,
                                           int64_t generation,
                                           absl::Time deadline) override;
  absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest& request) override;

 private:
  bool Register();
  void HeartbeatLoop();
  void Report(const v1::Progress& progress, const std::string& error);

  const Options options_;
  Backend* const backend_;  // Not owned.
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  absl::Notification shutdown_;
  std::thread heartbeat_;

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  std::string hostname_;
  // The generation of current_job_ being trained, and a newer one seen.
  int64_t current_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<v1::WorkerAssignment> next_generation_ ABSL_GUARDED_BY(mu_);
  bool poke_ ABSL_GUARDED_BY(mu_) = false;  // heartbeat now
  int64_t interval_ms_ ABSL_GUARDED_BY(mu_) = 1000;
  std::optional<v1::WorkerAssignment> assignment_ ABSL_GUARDED_BY(mu_);
  // A running job's offer: load its data, then report prepared_job_ (or
  // prepare_error_), asking often until the generation with us comes.
  std::optional<v1::WorkerAssignment> prepare_ ABSL_GUARDED_BY(mu_);
  std::string prepared_job_ ABSL_GUARDED_BY(mu_);
  std::string prepare_error_ ABSL_GUARDED_BY(mu_);
  absl::Time fast_poll_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string current_job_ ABSL_GUARDED_BY(mu_);   // job being trained
  std::string finished_job_ ABSL_GUARDED_BY(mu_);  // last job trained
  bool job_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  v1::Progress progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKER_AGENT_H_
