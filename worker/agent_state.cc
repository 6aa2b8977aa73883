#include "worker/agent_state.h"

namespace fulcrum {

bool AgentState::has_work() const {
  return assigned_.has_value() || ended_.has_value() ||
         phase_ == Phase::kOffered;
}

void AgentState::FillHeartbeat(v1::WorkerHeartbeatRequest* r) const {
  switch (phase_) {
    case Phase::kTraining:
    case Phase::kLeaving:
      r->set_job_id(job_.job_id());
      r->set_generation(generation_);
      break;
    case Phase::kPrepared:
      r->set_prepared_job(job_.job_id());
      r->set_prepare_error(prepare_error_);
      break;
    default:
      break;
  }
}

bool AgentState::FastPoll(absl::Time now) const {
  return phase_ == Phase::kPrepared && now < fast_poll_until_;
}

void AgentState::Offer(const v1::WorkerAssignment& a) {
  job_ = a;
  if (a.job_id() == finished_job_) {
    phase_ = Phase::kPrepared;  // trained (or left) it already
    prepare_error_ = "this worker already ended its part in the job";
    fast_poll_until_ = absl::InfinitePast();
    return;
  }
  phase_ = Phase::kOffered;
}

bool AgentState::OnAnswer(const v1::WorkerAssignment& a) {
  if (a.prepare()) {
    const bool another = a.job_id() != job_.job_id();
    if (phase_ == Phase::kIdle ||
        ((phase_ == Phase::kOffered || phase_ == Phase::kPrepared) &&
         another)) {
      Offer(a);
      return true;
    }
    return false;
  }
  bool wake = false;
  const bool training = phase_ == Phase::kTraining;
  if (training &&
      (a.job_id() != job_.job_id() || a.job_state() != v1::RUNNING)) {
    phase_ = Phase::kLeaving;  // cancelled or failed elsewhere
    wake = true;
  }
  if (a.job_state() != v1::RUNNING) {
    // Not a member (idle, or offered a place): the job it waits for ended.
    if (!training && phase_ != Phase::kLeaving && !a.job_id().empty() &&
        a.job_id() != finished_job_ && !ended_.has_value()) {
      ended_ = a;
      wake = true;
    }
    return wake;
  }
  const bool current =
      (training || phase_ == Phase::kLeaving) && a.job_id() == job_.job_id();
  if (!current && a.job_id() != finished_job_) {
    assigned_ = a;
    return true;
  }
  if (training && current && a.generation() > generation_) {
    next_generation_ = a;  // the job moved on: the trainer re-joins
    return true;
  }
  return wake;
}

void AgentState::OnForgotten() {
  if (phase_ == Phase::kTraining) phase_ = Phase::kLeaving;
  if (phase_ == Phase::kLeaving) {
    forgotten_ = true;  // Finished() forgets the job it winds down
    return;
  }
  // Forgotten after its training ended (the job refused it first): the
  // new member it registers as has ended no part in any job either.
  finished_job_.clear();
}

std::optional<AgentState::Work> AgentState::Take() {
  if (assigned_.has_value()) {
    job_ = std::move(*assigned_);
    assigned_.reset();
    phase_ = Phase::kTraining;
    generation_ = job_.generation();
    next_generation_.reset();
    prepare_error_.clear();
    return Work{Work::Kind::kTrain, job_};
  }
  if (ended_.has_value()) {
    Work work{Work::Kind::kEnded, std::move(*ended_)};
    ended_.reset();
    finished_job_ = work.assignment.job_id();  // told once
    if (phase_ != Phase::kTraining) {
      phase_ = Phase::kIdle;
      job_.Clear();
    }
    return work;
  }
  if (phase_ == Phase::kOffered) {
    phase_ = Phase::kPreparing;
    return Work{Work::Kind::kPrepare, job_};
  }
  return std::nullopt;
}

void AgentState::Prepared(const std::string& job_id, const absl::Status& status,
                          absl::Time now) {
  if (phase_ != Phase::kPreparing || job_.job_id() != job_id) return;
  phase_ = Phase::kPrepared;
  prepare_error_ = status.ok() ? "" : status.ToString();
  fast_poll_until_ = now + absl::Seconds(10);
}

std::optional<v1::WorkerAssignment> AgentState::TakeNextGeneration(
    const std::string& job_id, int64_t generation) {
  if (!next_generation_.has_value() || next_generation_->job_id() != job_id ||
      next_generation_->generation() <= generation)
    return std::nullopt;
  v1::WorkerAssignment a = std::move(*next_generation_);
  next_generation_.reset();
  generation_ = a.generation();
  return a;
}

void AgentState::Finished() {
  // Forgotten meanwhile, the worker registers again as a new member, which
  // has ended no part in the job: it may be offered a place in it.
  finished_job_ = forgotten_ ? "" : job_.job_id();
  forgotten_ = false;
  phase_ = Phase::kIdle;
  job_.Clear();
  generation_ = 0;
  next_generation_.reset();
}

}  // namespace fulcrum
