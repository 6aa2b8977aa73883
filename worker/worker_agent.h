// The worker process's control loop over its CoordinatorLink: trains each
// job it is assigned with a Trainer and reports the outcome; then it is
// idle again. Offered a place in a running job, it first loads the job's
// data; the job then takes it in at its next generation.
#ifndef FULCRUM_WORKER_WORKER_AGENT_H_
#define FULCRUM_WORKER_WORKER_AGENT_H_

#include <string>

#include "worker/backend/backend.h"
#include "worker/coordinator_link.h"
#include "worker/grpc_channel.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace fulcrum {

class WorkerAgent {
 public:
  struct Options {
    std::string coordinator = "127.0.0.1:7070";
    std::string device = "cpu";
    std::string data_root;  // see Trainer::Options
    int max_jobs = 0;  // exit after this many jobs; 0 = serve forever
    WorkerMetrics* metrics = nullptr;  // Not owned; may be null.
    double slowdown = 1.0;  // straggler injection (see Trainer::Options)
    absl::Duration step_delay = absl::ZeroDuration();
    absl::Duration step_delay_jitter = absl::ZeroDuration();
    // Shared memory with shards on this host (GrpcChannelFactory).
    bool shared_memory = true;
  };
  // `backend` is not owned and must outlive the agent.
  WorkerAgent(Options options, Backend* backend);

  // Serves until Shutdown() or max_jobs. Returns the process exit code.
  int Run();
  // Thread-safe; ends Run() at the next opportunity (a running job stops).
  void Shutdown() { link_.Shutdown(); }
  // Registered with the coordinator (for /readyz).
  bool Registered() { return link_.registered(); }

 private:
  void Train(Trainer& trainer, const v1::WorkerAssignment& a);

  const Options options_;
  Backend* const backend_;  // Not owned.
  CoordinatorLink link_;
  GrpcChannelFactory channels_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKER_AGENT_H_
