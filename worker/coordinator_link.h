// A worker process's link to the coordinator: registration (optionally for
// one job: an external trainer), heartbeats from its own thread carrying
// the latest progress, the AgentState those heartbeats drive, and the
// calls a session needs (JobLink: next generation, chunk leases), plus the
// outcome reports. WorkerAgent drives the built-in Trainer with it; the C
// API (worker/capi) drives a PyTorch script's session with it.
//
// Thread safety: every method is safe to call concurrently.
#ifndef FULCRUM_WORKER_COORDINATOR_LINK_H_
#define FULCRUM_WORKER_COORDINATOR_LINK_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "worker/agent_state.h"
#include "worker/job_link.h"

namespace fulcrum {

class CoordinatorLink : public JobLink {
 public:
  struct Options {
    std::string coordinator = "127.0.0.1:7070";
    std::string device = "cpu";
    // Non-empty: an external trainer of this job only (fulcrum.torch).
    std::string job_id;
    std::string log_prefix = "fulcrum-worker";
  };
  explicit CoordinatorLink(Options options);
  ~CoordinatorLink() override;

  // Registers, retrying while the coordinator is unreachable or at its
  // limits (RESOURCE_EXHAUSTED), logging why, until Shutdown() (CANCELLED)
  // or a refusal (logged; its status: e.g. NOT_FOUND for an unknown job).
  // Then heartbeats from its own thread until Shutdown(); a worker the
  // coordinator forgot registers again, and keeps trying.
  absl::Status Start();
  // Ends the heartbeats and every wait; a running job's session leaves.
  void Shutdown();
  // Leaves the coordinator (best effort). After Shutdown().
  void Leave();
  bool registered();
  std::string worker_id();

  // The next work for the training loop (AgentState::Take), waiting until
  // `deadline` or Shutdown() for one.
  std::optional<AgentState::Work> WaitForWork(absl::Time deadline);
  // The offer's data loaded (or not); said in the next heartbeats.
  void Prepared(const std::string& job_id, const absl::Status& status);
  // The worker ended its part in the job it trained.
  void Finished();
  // The latest progress Update() gave.
  v1::Progress LastProgress();
  // Reports the outcome of the job being trained: done (error empty) or
  // failed. Retried with backoff until the coordinator answers or
  // Shutdown(): a job must not lose its "done" to an outage.
  void Report(const v1::Progress& progress, const std::string& error);
  // An external model's tensors (Coordinator.DeclareModel).
  absl::StatusOr<v1::DeclareModelResponse> DeclareModel(
      const v1::DeclareModelRequest& request);

  // JobLink.
  void Update(const v1::Progress& progress) override;
  bool Leaving() override;
  std::optional<Assignment> NextAssignment(const std::string& job_id,
                                           int64_t generation,
                                           absl::Time deadline) override;
  absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest& request) override;

 private:
  absl::Status Register();
  void HeartbeatLoop();
  // One heartbeat; false when the worker could not register again.
  bool Heartbeat();

  const Options options_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::string hostname_;
  std::string host_id_;  // common/dataplane/host_id.h
  absl::Notification shutdown_;
  std::thread heartbeat_;

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  // Given at registration; every call as this member carries it.
  std::string credential_ ABSL_GUARDED_BY(mu_);
  void Sign(grpc::ClientContext* context);
  AgentState state_ ABSL_GUARDED_BY(mu_);
  bool poke_ ABSL_GUARDED_BY(mu_) = false;  // heartbeat now
  int64_t interval_ms_ ABSL_GUARDED_BY(mu_) = 1000;
  v1::Progress progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COORDINATOR_LINK_H_
