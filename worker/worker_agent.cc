#include "worker/worker_agent.h"

#include <unistd.h>

#include <iostream>

#include "common/net/grpc_options.h"
#include "common/net/retry.h"
#include "common/status/grpc_status.h"

namespace fulcrum {

WorkerAgent::WorkerAgent(Options options, Backend* backend)
    : options_(std::move(options)),
      backend_(backend),
      stub_(v1::Coordinator::NewStub(MakeChannel(options_.coordinator))) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  hostname_ = host;
}

WorkerAgent::~WorkerAgent() {
  Shutdown();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void WorkerAgent::Shutdown() {
  if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
  absl::MutexLock lock(&mu_);
  changed_.SignalAll();
}

bool WorkerAgent::Register() {
  v1::RegisterWorkerRequest request;
  request.set_hostname(hostname_);
  request.set_device(options_.device);
  v1::RegisterWorkerResponse response;
  RetryOptions retry;
  retry.retry_all = true;  // keep trying until the coordinator takes us
  absl::Status s = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetTimeout(&context, std::chrono::seconds(5));
        return FromGrpcStatus(
            stub_->RegisterWorker(&context, request, &response));
      },
      retry, &shutdown_,
      [](const absl::Status& failed) {
        std::cerr << "fulcrum-worker: register failed (" << failed.message()
                  << "), retrying\n";
      });
  if (!s.ok()) return false;
  absl::MutexLock lock(&mu_);
  worker_id_ = response.worker_id();
  interval_ms_ = std::max<int64_t>(50, response.heartbeat_interval_ms());
  std::cerr << "fulcrum-worker: registered as " << worker_id_ << " ("
            << backend_->Name() << ")\n";
  return true;
}

bool WorkerAgent::Heartbeat() {
  v1::WorkerHeartbeatRequest request;
  int64_t interval;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(worker_id_);
    state_.FillHeartbeat(&request);
    *request.mutable_progress() = progress_;
    interval = state_.FastPoll(absl::Now())
                   ? std::min<int64_t>(50, interval_ms_)
                   : interval_ms_;
    poke_ = false;
  }
  request.set_hostname(hostname_);
  request.set_device(options_.device);
  grpc::ClientContext context;
  SetTimeout(&context,
             std::chrono::milliseconds(std::max<int64_t>(1000, interval)));
  v1::WorkerHeartbeatResponse response;
  const grpc::Status s = stub_->WorkerHeartbeat(&context, request, &response);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    // The coordinator dropped us (lease expired): a job we train is gone.
    {
      absl::MutexLock lock(&mu_);
      state_.OnForgotten();
      changed_.SignalAll();
    }
    return Register();
  }
  absl::MutexLock lock(&mu_);
  if (s.ok() && state_.OnAnswer(response.assignment())) changed_.SignalAll();
  const absl::Time until = absl::Now() + absl::Milliseconds(interval);
  while (!poke_ && !shutdown_.HasBeenNotified()) {
    if (changed_.WaitWithDeadline(&mu_, until)) break;
  }
  return true;
}

void WorkerAgent::HeartbeatLoop() {
  while (!shutdown_.HasBeenNotified()) {
    if (!Heartbeat()) return;
  }
}

std::optional<Assignment> WorkerAgent::NextAssignment(
    const std::string& job_id, int64_t generation, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  poke_ = true;  // ask the coordinator now, not at the next interval
  changed_.SignalAll();
  absl::Time poke_again = absl::Now() + absl::Milliseconds(100);
  for (;;) {
    if (std::optional<v1::WorkerAssignment> a =
            state_.TakeNextGeneration(job_id, generation)) {
      return FromProto(*a);
    }
    if (state_.leaving() || shutdown_.HasBeenNotified()) return std::nullopt;
    if (absl::Now() >= deadline) return std::nullopt;
    changed_.WaitWithDeadline(&mu_, std::min(deadline, poke_again));
    if (absl::Now() >= poke_again) {  // keep asking while we wait
      poke_ = true;
      changed_.SignalAll();
      poke_again = absl::Now() + absl::Milliseconds(100);
    }
  }
}

absl::StatusOr<v1::LeaseChunkResponse> WorkerAgent::LeaseChunk(
    const v1::LeaseChunkRequest& request) {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(5));
  v1::LeaseChunkResponse response;
  grpc::Status s = stub_->LeaseChunk(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

bool WorkerAgent::Registered() {
  absl::MutexLock lock(&mu_);
  return !worker_id_.empty();
}

void WorkerAgent::Update(const v1::Progress& progress) {
  absl::MutexLock lock(&mu_);
  progress_ = progress;
}

bool WorkerAgent::Leaving() {
  absl::MutexLock lock(&mu_);
  return state_.leaving() || shutdown_.HasBeenNotified();
}

void WorkerAgent::Report(const v1::Progress& progress,
                         const std::string& error) {
  v1::ReportProgressRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(worker_id_);
    request.set_job_id(state_.job().job_id());
  }
  *request.mutable_progress() = progress;
  request.set_done(error.empty());
  request.set_error(error);
  RetryOptions retry;
  retry.max_attempts = 5;
  absl::Status s = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetTimeout(&context, std::chrono::seconds(5));
        v1::ReportProgressResponse response;
        return FromGrpcStatus(
            stub_->ReportProgress(&context, request, &response));
      },
      retry, nullptr);
  if (!s.ok()) {
    std::cerr << "fulcrum-worker: could not report the outcome of "
              << request.job_id() << ": " << s.message() << "\n";
  }
}

void WorkerAgent::Train(Trainer& trainer, const v1::WorkerAssignment& a) {
  std::cerr << "fulcrum-worker: training " << a.job_id() << " as rank "
            << a.rank() << " of " << a.world_size() << "\n";
  {
    absl::MutexLock lock(&mu_);
    progress_.Clear();
  }
  absl::StatusOr<TrainResult> result = trainer.Run(FromProto(a), this);
  if (result.ok()) {
    std::cerr << "fulcrum-worker: " << a.job_id() << " done at step "
              << result->progress.step() << "\n";
    Report(result->progress, "");
  } else {
    const bool leaving = Leaving();
    std::cerr << "fulcrum-worker: " << a.job_id()
              << (leaving ? " left: " : " failed: ") << result.status() << "\n";
    v1::Progress last;
    {
      absl::MutexLock lock(&mu_);
      last = progress_;
    }
    if (!leaving) Report(last, result.status().ToString());
  }
  absl::MutexLock lock(&mu_);
  state_.Finished();
}

void WorkerAgent::Leave() {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(2));
  v1::LeaveRequest leave;
  {
    absl::MutexLock lock(&mu_);
    leave.set_member_id(worker_id_);
  }
  v1::LeaveResponse left;
  stub_->Leave(&context, leave, &left);  // best effort
}

int WorkerAgent::Run() {
  if (!Register()) return 0;
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  Trainer::Options trainer_options;
  {
    absl::MutexLock lock(&mu_);
    trainer_options.worker_id = worker_id_;
  }
  trainer_options.metrics = options_.metrics;
  trainer_options.slowdown = options_.slowdown;
  trainer_options.step_delay = options_.step_delay;
  trainer_options.step_delay_jitter = options_.step_delay_jitter;
  trainer_options.delay_seed =
      std::hash<std::string>()(trainer_options.worker_id);
  Trainer trainer(backend_, &channels_, trainer_options);
  int jobs = 0;
  while (!shutdown_.HasBeenNotified()) {
    std::optional<AgentState::Work> work;
    {
      absl::MutexLock lock(&mu_);
      while (!state_.has_work() && !shutdown_.HasBeenNotified())
        changed_.WaitWithTimeout(&mu_, absl::Milliseconds(200));
      work = state_.Take();
    }
    if (!work.has_value()) break;  // shutdown
    const v1::WorkerAssignment& a = work->assignment;
    if (work->kind == AgentState::Work::Kind::kPrepare) {
      std::cerr << "fulcrum-worker: preparing to join " << a.job_id() << "\n";
      const absl::Status prepared = trainer.Prepare(a.spec());
      if (!prepared.ok()) {
        std::cerr << "fulcrum-worker: cannot join " << a.job_id() << ": "
                  << prepared << "\n";
      }
      absl::MutexLock lock(&mu_);
      state_.Prepared(a.job_id(), prepared, absl::Now());
      poke_ = true;
      changed_.SignalAll();
      continue;
    }
    Train(trainer, a);
    if (options_.max_jobs > 0 && ++jobs >= options_.max_jobs) break;
  }
  Shutdown();
  if (heartbeat_.joinable()) heartbeat_.join();
  Leave();
  return 0;
}

}  // namespace fulcrum
