#include "worker/worker_agent.h"

#include <iostream>

namespace fulcrum {

WorkerAgent::WorkerAgent(Options options, Backend* backend)
    : options_(std::move(options)),
      backend_(backend),
      link_({options_.coordinator, options_.device, "", "fulcrum-worker"}),
      channels_(options_.shared_memory) {}

void WorkerAgent::Train(Trainer& trainer, const v1::WorkerAssignment& a) {
  std::cerr << "fulcrum-worker: training " << a.job_id() << " as rank "
            << a.rank() << " of " << a.world_size() << "\n";
  trainer.set_worker_id(link_.worker_id());  // new after a re-registration
  absl::StatusOr<TrainResult> result = trainer.Run(FromProto(a), &link_);
  if (result.ok()) {
    std::cerr << "fulcrum-worker: " << a.job_id() << " done at step "
              << result->progress.step() << "\n";
    link_.Report(result->progress, "");
  } else {
    const bool leaving = link_.Leaving();
    std::cerr << "fulcrum-worker: " << a.job_id()
              << (leaving ? " left: " : " failed: ") << result.status() << "\n";
    // The last progress the trainer reported goes with the error.
    if (!leaving) link_.Report(link_.LastProgress(), result.status().ToString());
  }
  link_.Finished();
}

int WorkerAgent::Run() {
  if (absl::Status s = link_.Start(); !s.ok()) {
    // Shut down while registering is a normal exit; a refusal (logged by
    // the link) is not.
    return s.code() == absl::StatusCode::kCancelled ? 0 : 1;
  }
  Trainer::Options trainer_options;
  trainer_options.worker_id = link_.worker_id();
  trainer_options.metrics = options_.metrics;
  trainer_options.data_root = options_.data_root;
  trainer_options.slowdown = options_.slowdown;
  trainer_options.step_delay = options_.step_delay;
  trainer_options.step_delay_jitter = options_.step_delay_jitter;
  trainer_options.delay_seed =
      std::hash<std::string>()(trainer_options.worker_id);
  Trainer trainer(backend_, &channels_, trainer_options);
  int jobs = 0;
  for (;;) {
    std::optional<AgentState::Work> work =
        link_.WaitForWork(absl::InfiniteFuture());
    if (!work.has_value()) break;  // shutdown
    const v1::WorkerAssignment& a = work->assignment;
    if (work->kind == AgentState::Work::Kind::kEnded) {
      std::cerr << "fulcrum-worker: " << a.job_id() << " ended ("
                << v1::JobState_Name(a.job_state()) << ") before taking "
                << "this worker in\n";
      continue;
    }
    if (work->kind == AgentState::Work::Kind::kPrepare) {
      std::cerr << "fulcrum-worker: preparing to join " << a.job_id() << "\n";
      const absl::Status prepared = trainer.Prepare(a.spec());
      if (!prepared.ok()) {
        std::cerr << "fulcrum-worker: cannot join " << a.job_id() << ": "
                  << prepared << "\n";
      }
      link_.Prepared(a.job_id(), prepared);
      continue;
    }
    Train(trainer, a);
    if (options_.max_jobs > 0 && ++jobs >= options_.max_jobs) break;
  }
  link_.Shutdown();
  link_.Leave();
  return 0;
}

}  // namespace fulcrum
