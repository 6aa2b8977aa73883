// The worker process's control loop: registers with the coordinator,
// heartbeats (carrying the latest progress) from its own thread, and trains
// each job it is assigned with a Trainer, reporting the outcome; then it is
// idle again. Offered a place in a running job, it first loads the job's
// data and says so; the job then takes it in at its next generation. What
// the worker is doing about jobs is one AgentState (agent_state.h); this
// class does the RPCs and the threads, and is the Trainer's JobLink.
#ifndef FULCRUM_WORKER_WORKER_AGENT_H_
#define FULCRUM_WORKER_WORKER_AGENT_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "worker/agent_state.h"
#include "worker/backend/backend.h"
#include "worker/grpc_channel.h"
#include "worker/job_link.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace fulcrum {

class WorkerAgent : public JobLink {
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

  // JobLink.
  void Update(const v1::Progress& progress) override;
  bool Leaving() override;
  std::optional<Assignment> NextAssignment(const std::string& job_id,
                                           int64_t generation,
                                           absl::Time deadline) override;
  absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest& request) override;

 private:
  bool Register();
  void HeartbeatLoop();
  // One heartbeat; false when the worker could not register again.
  bool Heartbeat();
  void Train(Trainer& trainer, const v1::WorkerAssignment& a);
  void Report(const v1::Progress& progress, const std::string& error);
  void Leave();

  const Options options_;
  Backend* const backend_;  // Not owned.
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  GrpcChannelFactory channels_;
  absl::Notification shutdown_;
  std::thread heartbeat_;
  std::string hostname_;

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  AgentState state_ ABSL_GUARDED_BY(mu_);
  bool poke_ ABSL_GUARDED_BY(mu_) = false;  // heartbeat now
  int64_t interval_ms_ ABSL_GUARDED_BY(mu_) = 1000;
  v1::Progress progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKER_AGENT_H_
