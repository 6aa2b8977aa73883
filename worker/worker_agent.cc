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
      stub_(v1::Coordinator::NewStub(MakeChannel(options_.coordinator))) {}

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
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  hostname_ = host;
  v1::RegisterWorkerRequest request;
  request.set_hostname(host);
  request.set_device(options_.device);
  v1::RegisterWorkerResponse response;
  RetryOptions retry;
  retry.retry_all = true;  // keep trying until the coordinator takes us
  grpc::Status s = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetTimeout(&context, std::chrono::seconds(5));
        return stub_->RegisterWorker(&context, request, &response);
      },
      retry, &shutdown_,
      [](const grpc::Status& failed) {
        std::cerr << "fulcrum-worker: register failed ("
                  << failed.error_message() << "), retrying\n";
      });
  if (!s.ok()) return false;
  absl::MutexLock lock(&mu_);
  worker_id_ = response.worker_id();
  interval_ms_ = std::max<int64_t>(50, response.heartbeat_interval_ms());
  std::cerr << "fulcrum-worker: registered as " << worker_id_ << " ("
            << backend_->Name() << ")\n";
  return true;
}

void WorkerAgent::HeartbeatLoop() {
  for (;;) {
    v1::WorkerHeartbeatRequest request;
    int64_t interval;
    {
      absl::MutexLock lock(&mu_);
      request.set_worker_id(worker_id_);
      request.set_job_id(current_job_);
      request.set_generation(current_generation_);
      *request.mutable_progress() = progress_;
      request.set_prepared_job(prepared_job_);
      request.set_prepare_error(prepare_error_);
      // Prepared: the generation that takes us in comes within a round.
      interval = absl::Now() < fast_poll_until_
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
    grpc::Status s = stub_->WorkerHeartbeat(&context, request, &response);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      // The coordinator dropped us (lease expired): a job we train is gone.
      {
        absl::MutexLock lock(&mu_);
        job_cancelled_ = true;
      }
      if (!Register()) return;
      continue;
    }
    if (s.ok() && response.assignment().prepare()) {
      absl::MutexLock lock(&mu_);
      const v1::WorkerAssignment& a = response.assignment();
      if (current_job_.empty() && a.job_id() != prepared_job_ &&
          !(prepare_.has_value() && prepare_->job_id() == a.job_id())) {
        if (a.job_id() == finished_job_) {
          prepared_job_ = a.job_id();  // trained (or left) it already
          prepare_error_ = "this worker already ended its part in the job";
          poke_ = true;
        } else {
          prepare_ = a;
          changed_.SignalAll();
        }
      }
    } else if (s.ok()) {
      absl::MutexLock lock(&mu_);
      const v1::WorkerAssignment& a = response.assignment();
      if (!current_job_.empty() &&
          (a.job_id() != current_job_ || a.job_state() != v1::RUNNING)) {
        job_cancelled_ = true;  // cancelled or failed elsewhere
      }
      if (a.job_state() == v1::RUNNING && a.job_id() != current_job_ &&
          a.job_id() != finished_job_) {
        assignment_ = a;
        changed_.SignalAll();
      }
      if (a.job_state() == v1::RUNNING && a.job_id() == current_job_ &&
          a.generation() > current_generation_) {
        next_generation_ = a;  // the job moved on: the trainer re-joins
        changed_.SignalAll();
      }
    }
    absl::MutexLock lock(&mu_);
    const absl::Time until = absl::Now() + absl::Milliseconds(interval);
    while (!poke_ && !shutdown_.HasBeenNotified()) {
      if (changed_.WaitWithDeadline(&mu_, until)) break;
    }
    if (shutdown_.HasBeenNotified()) return;
  }
}

std::optional<Assignment> WorkerAgent::NextAssignment(
    const std::string& job_id, int64_t generation, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  poke_ = true;  // ask the coordinator now, not at the next interval
  changed_.SignalAll();
  absl::Time poke_again = absl::Now() + absl::Milliseconds(100);
  for (;;) {
    if (next_generation_.has_value() && next_generation_->job_id() == job_id &&
        next_generation_->generation() > generation) {
      const v1::WorkerAssignment a = *next_generation_;
      next_generation_.reset();
      current_generation_ = a.generation();
      std::cerr << "fulcrum-worker: " << job_id << " generation "
                << a.generation() << ": rank " << a.rank() << " of "
                << a.world_size() << "\n";
      return Assignment{a.job_id(),
                        a.spec(),
                        a.rank(),
                        a.world_size(),
                        a.generation(),
                        {a.shard_addresses().begin(),
                         a.shard_addresses().end()}};
    }
    if (job_cancelled_ || shutdown_.HasBeenNotified()) return std::nullopt;
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

bool WorkerAgent::Cancelled() {
  absl::MutexLock lock(&mu_);
  return job_cancelled_ || shutdown_.HasBeenNotified();
}

void WorkerAgent::Report(const v1::Progress& progress,
                         const std::string& error) {
  v1::ReportProgressRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(worker_id_);
    request.set_job_id(current_job_);
  }
  *request.mutable_progress() = progress;
  request.set_done(error.empty());
  request.set_error(error);
  RetryOptions retry;
  retry.max_attempts = 5;
  grpc::Status s = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetTimeout(&context, std::chrono::seconds(5));
        v1::ReportProgressResponse response;
        return stub_->ReportProgress(&context, request, &response);
      },
      retry, nullptr);
  if (!s.ok()) {
    std::cerr << "fulcrum-worker: could not report the outcome of "
              << request.job_id() << ": " << s.error_message() << "\n";
  }
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
  Trainer trainer(backend_, trainer_options);
  int jobs = 0;
  while (!shutdown_.HasBeenNotified()) {
    v1::WorkerAssignment a;
    {
      absl::MutexLock lock(&mu_);
      while (!assignment_.has_value() && !prepare_.has_value() &&
             !shutdown_.HasBeenNotified()) {
        changed_.WaitWithTimeout(&mu_, absl::Milliseconds(200));
      }
      if (!assignment_.has_value() && prepare_.has_value()) {
        const v1::WorkerAssignment offer = *prepare_;
        prepare_.reset();
        mu_.Unlock();
        std::cerr << "fulcrum-worker: preparing to join " << offer.job_id()
                  << "\n";
        const absl::Status prepared = trainer.Prepare(offer.spec());
        if (!prepared.ok()) {
          std::cerr << "fulcrum-worker: cannot join " << offer.job_id()
                    << ": " << prepared << "\n";
        }
        mu_.Lock();
        prepared_job_ = offer.job_id();
        prepare_error_ = prepared.ok() ? "" : prepared.ToString();
        fast_poll_until_ = absl::Now() + absl::Seconds(10);
        poke_ = true;
        changed_.SignalAll();
        continue;
      }
      if (!assignment_.has_value()) break;
      a = *assignment_;
      assignment_.reset();
      prepared_job_.clear();
      prepare_error_.clear();
      fast_poll_until_ = absl::InfinitePast();
      current_job_ = a.job_id();
      current_generation_ = a.generation();
      next_generation_.reset();
      job_cancelled_ = false;
      progress_.Clear();
    }
    std::cerr << "fulcrum-worker: training " << a.job_id() << " as rank "
              << a.rank() << " of " << a.world_size() << "\n";
    Assignment assignment{
        a.job_id(),
        a.spec(),
        a.rank(),
        a.world_size(),
        a.generation(),
        {a.shard_addresses().begin(), a.shard_addresses().end()}};
    absl::StatusOr<TrainResult> result = trainer.Run(assignment, this);
    if (result.ok()) {
      std::cerr << "fulcrum-worker: " << a.job_id() << " done at step "
                << result->progress.step() << "\n";
      Report(result->progress, "");
    } else {
      std::cerr << "fulcrum-worker: " << a.job_id()
                << (Cancelled() ? " left: " : " failed: ") << result.status()
                << "\n";
      v1::Progress last;
      {
        absl::MutexLock lock(&mu_);
        last = progress_;
      }
      if (!Cancelled()) Report(last, result.status().ToString());
    }
    {
      absl::MutexLock lock(&mu_);
      finished_job_ = current_job_;
      current_job_.clear();
    }
    if (options_.max_jobs > 0 && ++jobs >= options_.max_jobs) break;
  }
  Shutdown();
  if (heartbeat_.joinable()) heartbeat_.join();
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(2));
  v1::LeaveRequest leave;
  {
    absl::MutexLock lock(&mu_);
    leave.set_member_id(worker_id_);
  }
  v1::LeaveResponse left;
  stub_->Leave(&context, leave, &left);
  return 0;
}

}  // namespace fulcrum
