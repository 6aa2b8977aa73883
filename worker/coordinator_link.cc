#include "worker/coordinator_link.h"

#include <unistd.h>

#include <iostream>

#include "common/dataplane/host_id.h"
#include "common/net/grpc_options.h"
#include "common/net/member_credential.h"
#include "common/net/retry.h"
#include "common/status/grpc_status.h"

namespace fulcrum {

CoordinatorLink::CoordinatorLink(Options options)
    : options_(std::move(options)),
      stub_(v1::Coordinator::NewStub(MakeChannel(options_.coordinator))) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  hostname_ = host[0] != 0 ? host : "localhost";
  host_id_ = HostId();
}

CoordinatorLink::~CoordinatorLink() {
  Shutdown();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void CoordinatorLink::Shutdown() {
  if (!shutdown_.HasBeenNotified()) shutdown_.Notify();
  absl::MutexLock lock(&mu_);
  changed_.SignalAll();
}

absl::Status CoordinatorLink::Register() {
  v1::RegisterWorkerRequest request;
  request.set_hostname(hostname_);
  request.set_host_id(host_id_);
  request.set_device(options_.device);
  request.set_job_id(options_.job_id);
  v1::RegisterWorkerResponse response;
  // Until the coordinator answers: unreachable, or at its limits
  // (RESOURCE_EXHAUSTED: a place may free up) is retried with backoff and
  // logged; any other refusal (an unknown job, a bad credential) is final.
  RetryOptions retry;
  retry.max = std::chrono::milliseconds(5000);
  retry.also_retry = {absl::StatusCode::kResourceExhausted};
  absl::Status s = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetTimeout(&context, std::chrono::seconds(5));
        return FromGrpcStatus(
            stub_->RegisterWorker(&context, request, &response));
      },
      retry, &shutdown_,
      [this](const absl::Status& failed) {
        std::cerr << options_.log_prefix << ": register failed ("
                  << absl::StatusCodeToString(failed.code()) << ": "
                  << failed.message() << "), retrying\n";
      });
  if (!s.ok()) {
    if (!shutdown_.HasBeenNotified()) {
      std::cerr << options_.log_prefix << ": the coordinator refused to "
                << "register this worker: " << s << "\n";
    }
    return s;
  }
  absl::MutexLock lock(&mu_);
  worker_id_ = response.worker_id();
  credential_ = response.member_credential();
  interval_ms_ = std::max<int64_t>(50, response.heartbeat_interval_ms());
  std::cerr << options_.log_prefix << ": registered as " << worker_id_
            << " (" << options_.device << ")\n";
  return absl::OkStatus();
}

absl::Status CoordinatorLink::Start() {
  if (absl::Status s = Register(); !s.ok()) return s;
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return absl::OkStatus();
}

bool CoordinatorLink::Heartbeat() {
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
  request.set_host_id(host_id_);
  request.set_device(options_.device);
  grpc::ClientContext context;
  SetTimeout(&context,
             std::chrono::milliseconds(std::max<int64_t>(1000, interval)));
  // Waits (to the deadline) for the connection instead of failing at once
  // while the channel backs off: the waiting call drives the reconnection.
  // A process whose only gRPC calls are heartbeats (a host group's member,
  // which has no streams of its own) otherwise kept failing with the old
  // error after a restarted coordinator was back, and lost its job.
  context.set_wait_for_ready(true);
  Sign(&context);
  v1::WorkerHeartbeatResponse response;
  const grpc::Status s = stub_->WorkerHeartbeat(&context, request, &response);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    // The coordinator dropped us (lease expired): a job we train is gone.
    {
      absl::MutexLock lock(&mu_);
      state_.OnForgotten();
      changed_.SignalAll();
    }
    // A refusal is logged by Register; the heartbeats go on (and register
    // again) after an interval rather than ending for good.
    if (!Register().ok() && !shutdown_.HasBeenNotified()) {
      absl::MutexLock lock(&mu_);
      changed_.WaitWithDeadline(&mu_, absl::Now() + absl::Seconds(5));
    }
    return true;
  }
  absl::MutexLock lock(&mu_);
  if (s.ok() && state_.OnAnswer(response.assignment())) changed_.SignalAll();
  // An unanswered heartbeat (it already waited up to its deadline for the
  // connection) is sent again soon: a healed link is used within moments,
  // so members cut off together rejoin together. (An answered refusal
  // waits the interval.)
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    interval = std::min<int64_t>(interval, 100);
  }
  const absl::Time until = absl::Now() + absl::Milliseconds(interval);
  while (!poke_ && !shutdown_.HasBeenNotified()) {
    if (changed_.WaitWithDeadline(&mu_, until)) break;
  }
  return true;
}

void CoordinatorLink::HeartbeatLoop() {
  while (!shutdown_.HasBeenNotified()) {
    if (!Heartbeat()) return;
  }
}

std::optional<AgentState::Work> CoordinatorLink::WaitForWork(
    absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (!state_.has_work() && !shutdown_.HasBeenNotified() &&
         absl::Now() < deadline) {
    changed_.WaitWithDeadline(&mu_,
                              std::min(deadline, absl::Now() + absl::Milliseconds(200)));
  }
  if (shutdown_.HasBeenNotified()) return std::nullopt;
  std::optional<AgentState::Work> work = state_.Take();
  if (work.has_value()) progress_.Clear();
  return work;
}

void CoordinatorLink::Prepared(const std::string& job_id,
                               const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  state_.Prepared(job_id, status, absl::Now());
  poke_ = true;
  changed_.SignalAll();
}

v1::Progress CoordinatorLink::LastProgress() {
  absl::MutexLock lock(&mu_);
  return progress_;
}

void CoordinatorLink::Finished() {
  absl::MutexLock lock(&mu_);
  state_.Finished();
}

std::optional<Assignment> CoordinatorLink::NextAssignment(
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

absl::StatusOr<v1::LeaseChunkResponse> CoordinatorLink::LeaseChunk(
    const v1::LeaseChunkRequest& request) {
  grpc::ClientContext context;
  // Short: the session asks again while the coordinator does not answer,
  // and an attempt stuck on a link that went down should not delay the
  // first one after it heals.
  SetTimeout(&context, std::chrono::seconds(2));
  Sign(&context);
  v1::LeaseChunkResponse response;
  grpc::Status s = stub_->LeaseChunk(&context, request, &response);
  if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    // The job may have ended (another worker reached the target in an
    // ssp/async job) before this worker's heartbeat said so: ask now, so
    // that the caller sees Leaving() rather than a failure.
    absl::MutexLock lock(&mu_);
    poke_ = true;
    changed_.SignalAll();
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    while (!state_.leaving() && !shutdown_.HasBeenNotified() &&
           absl::Now() < deadline) {
      changed_.WaitWithDeadline(&mu_, deadline);
    }
  }
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<v1::DeclareModelResponse> CoordinatorLink::DeclareModel(
    const v1::DeclareModelRequest& request) {
  v1::DeclareModelResponse response;
  absl::Status s = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetTimeout(&context, std::chrono::seconds(10));
        Sign(&context);
        return FromGrpcStatus(stub_->DeclareModel(&context, request, &response));
      },
      RetryOptions{std::chrono::milliseconds(100),
                   std::chrono::milliseconds(2000), 10, false},
      &shutdown_);
  if (!s.ok()) return s;
  return response;
}

bool CoordinatorLink::registered() {
  absl::MutexLock lock(&mu_);
  return !worker_id_.empty();
}

std::string CoordinatorLink::worker_id() {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

void CoordinatorLink::Update(const v1::Progress& progress) {
  absl::MutexLock lock(&mu_);
  progress_ = progress;
}

bool CoordinatorLink::Leaving() {
  absl::MutexLock lock(&mu_);
  return state_.leaving() || shutdown_.HasBeenNotified();
}

void CoordinatorLink::Report(const v1::Progress& progress,
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
  // Retried until the coordinator answers (a restarted or unreachable one
  // included): a lost "done" left the job running for ever. The report is
  // idempotent there (a repeated "done" is acknowledged, nothing changes);
  // a refusal (NOT_FOUND, PERMISSION_DENIED) ends the retries.
  RetryOptions retry;
  retry.max = std::chrono::milliseconds(2000);
  absl::Time next_log = absl::Now();
  absl::Status s = RetryWithBackoff(
      [&] {
        grpc::ClientContext context;
        SetTimeout(&context, std::chrono::seconds(5));
        Sign(&context);
        v1::ReportProgressResponse response;
        return FromGrpcStatus(
            stub_->ReportProgress(&context, request, &response));
      },
      retry, &shutdown_,
      [&](const absl::Status& failed) {
        if (absl::Now() < next_log) return;
        next_log = absl::Now() + absl::Seconds(10);
        std::cerr << options_.log_prefix << ": reporting the outcome of "
                  << request.job_id() << " failed (" << failed.message()
                  << "), retrying until the coordinator answers\n";
      });
  if (!s.ok()) {
    std::cerr << options_.log_prefix << ": could not report the outcome of "
              << request.job_id() << ": " << s.message() << "\n";
  }
}

void CoordinatorLink::Sign(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (!credential_.empty()) {
    context->AddMetadata(kMemberMetadataKey,
                         MemberMetadataValue(worker_id_, credential_));
  }
}

void CoordinatorLink::Leave() {
  if (heartbeat_.joinable()) heartbeat_.join();
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(2));
  Sign(&context);
  v1::LeaveRequest leave;
  leave.set_member_id(worker_id());
  v1::LeaveResponse left;
  stub_->Leave(&context, leave, &left);  // best effort
}

}  // namespace fulcrum
