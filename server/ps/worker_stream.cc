#include "server/ps/worker_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

// Every chunk of `partition`'s current values; clock < 0: its version.
// Counts the bytes in `pulled` (may be null).
// more: another partition follows at once (ParamsHeader::more).
absl::Status SendOne(JobShard& job, int32_t partition, int64_t clock,
                     WireEncoding encoding, ParamsWriter* writer,
                     metrics::Counter* pulled, bool more = false) {
  const int64_t size = job.PartitionSize(partition);
  const int64_t chunk = job.chunk_elems();
  for (int64_t offset = 0; offset < size; offset += chunk) {
    ParamsHeader h;
    h.partition = partition;
    h.offset = offset;
    h.count = std::min(chunk, size - offset);
    h.encoding = encoding;
    h.more = more || offset + h.count < size;
    const ParamsRoom room = writer->Reserve(partition, offset, h.count,
                                            encoding);
    RETURN_IF_ERROR(job.Read(partition, offset, h.count, room.encoding,
                             room.data, &h.version, &h.stop));
    h.clock = clock < 0 ? h.version : clock;
    if (pulled != nullptr) {
      pulled->Increment(
          static_cast<double>(ElementBytes(encoding) * h.count));
    }
    if (!writer->Send(h)) return absl::UnavailableError("peer closed the stream");
  }
  return absl::OkStatus();
}

// The member indices a stream pushes for: the hello's worker, then its
// group's.
absl::StatusOr<std::vector<int>> GroupMembers(const JobShard& job,
                                              const StreamHello& hello) {
  std::vector<int> members;
  ASSIGN_OR_RETURN(const int own,
                   job.MemberIndex(hello.worker_id, hello.generation));
  members.push_back(own);
  if (hello.group.empty()) return members;
  if (job.mode() != JobShard::Mode::kSync) {
    return absl::FailedPreconditionError(absl::StrCat(
        "hello.group: job ", hello.job_id,
        " is not sync; only sync jobs pre-reduce (wire.pre_reduce)"));
  }
  if (hello.group.size() > kMaxGroup) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.group names ", hello.group.size(),
                     " workers, at most ", kMaxGroup));
  }
  for (const std::string& worker : hello.group) {
    ASSIGN_OR_RETURN(const int m, job.MemberIndex(worker, hello.generation));
    if (std::find(members.begin(), members.end(), m) != members.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hello.group names worker '", worker.substr(0, 64),
                       "' twice (or the hello's own worker)"));
    }
    members.push_back(m);
  }
  return members;
}

}  // namespace

absl::Status SendPartitions(JobShard& job, std::vector<int32_t> ids,
                            ParamsWriter* writer, metrics::Counter* pulled) {
  if (ids.empty()) ids = job.partition_ids();
  for (int32_t id : ids) {
    if (job.PartitionSize(id) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("partitions: ", id, " is not held by this shard"));
    }
  }
  for (int32_t id : ids) {
    RETURN_IF_ERROR(
        SendOne(job, id, -1, WireEncoding::kFp32, writer, pulled));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerStream>> WorkerStream::Open(
    ParameterShard& shard, const StreamHello& hello, Options options,
    ParamsWriter* writer) {
  // Ids are short; a long one is refused without being echoed.
  constexpr size_t kMaxId = 256;
  if (hello.job_id.size() > kMaxId || hello.worker_id.size() > kMaxId) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hello.job_id and hello.worker_id must be at most ", kMaxId,
        " bytes, got ", hello.job_id.size(), " and ", hello.worker_id.size()));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<JobShard> job, shard.Find(hello.job_id));
  if (job->ended()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", hello.job_id, " has ended"));
  }
  ASSIGN_OR_RETURN(std::vector<int> members, GroupMembers(*job, hello));
  if (!job->initialized()) {
    return absl::UnavailableError(absl::StrCat(
        "job ", hello.job_id, " waits for its values from a member; retry"));
  }
  const int member = members[0];
  if (options.metrics != nullptr && members.size() > 1) {
    options.metrics->group_members.WithLabels().Increment(
        static_cast<double>(members.size() - 1));
  }
  std::unique_ptr<WorkerStream> stream(
      new WorkerStream(std::move(job), std::move(members), hello.generation,
                       std::move(options), writer));
  JobShard& j = *stream->job_;
  const int64_t clock =
      j.mode() == JobShard::Mode::kSync ? -1 : j.clocks().Clock(member);
  RETURN_IF_ERROR(stream->SendAll(clock));
  return stream;
}

WorkerStream::WorkerStream(std::shared_ptr<JobShard> job,
                           std::vector<int> members, int64_t generation,
                           Options options, ParamsWriter* writer)
    : job_(std::move(job)),
      members_(std::move(members)),
      generation_(generation),
      options_(std::move(options)),
      writer_(writer),
      // Validated at submission (unset: fp32).
      params_encoding_(EncodingFromProto(job_->init().spec.wire().parameters(),
                                         "wire.parameters")
                           .value_or(WireEncoding::kFp32)) {
  if (options_.metrics != nullptr)
    metrics_ = options_.metrics->ForJob(job_->init().job_id);
  completed_.reserve(job_->partition_ids().size());
}

WorkerStream::~WorkerStream() {
  if (job_->mode() != JobShard::Mode::kSync)
    job_->clocks().Finish(members_[0], generation_);  // no groups there
}

absl::Status WorkerStream::SendAll(int64_t clock) {
  const std::vector<int32_t>& ids = job_->partition_ids();
  for (size_t i = 0; i < ids.size(); ++i)
    RETURN_IF_ERROR(SendPartition(ids[i], clock, i + 1 < ids.size()));
  return absl::OkStatus();
}

bool WorkerStream::NextReady(size_t i, int64_t clock) {
  return i + 1 < completed_.size() &&
         job_->HasVersion(completed_[i + 1], clock, generation_);
}

absl::Status WorkerStream::SendPartition(int32_t partition, int64_t clock,
                                         bool more) {
  return SendOne(*job_, partition, clock, params_encoding_, writer_,
                 metrics_.pull_bytes, more);
}

absl::StatusOr<std::optional<int64_t>> WorkerStream::Accept(PushChunk chunk) {
  chunk.generation = generation_;
  if (metrics_.push_bytes != nullptr)
    metrics_.push_bytes->Increment(static_cast<double>(chunk.data.bytes()));
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(const PushOutcome outcome, job_->Push(members_, chunk));
  if (metrics_.aggregate_seconds != nullptr) {
    metrics_.aggregate_seconds->Observe(
        absl::ToDoubleSeconds(absl::Now() - start));
  }
  if (outcome == PushOutcome::kPartial) return std::nullopt;
  if (chunk.step != completing_step_) {
    completed_.clear();
    completing_step_ = chunk.step;
  }
  if (std::find(completed_.begin(), completed_.end(), chunk.partition) !=
      completed_.end())
    return std::nullopt;  // a repeat on this stream
  completed_.push_back(chunk.partition);
  if (completed_.size() < job_->partition_ids().size()) return std::nullopt;
  // The worker pushed its whole share of step t: answer its read at t + 1.
  return chunk.step + 1;
}

absl::Status WorkerStream::Push(PushChunk chunk) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> read, Accept(std::move(chunk)));
  if (!read) return absl::OkStatus();
  RETURN_IF_ERROR(AnswerRead(*read));
  completed_.clear();
  return absl::OkStatus();
}

absl::Status WorkerStream::PushAsync(PushChunk chunk,
                                     std::function<void(absl::Status)> answered,
                                     bool* pending) {
  *pending = false;
  ASSIGN_OR_RETURN(const std::optional<int64_t> read, Accept(std::move(chunk)));
  if (!read) return absl::OkStatus();
  answer_ = Answer();
  answer_.clock = *read;
  answer_.answered = std::move(answered);
  // cancelled_ stays: a cancel that came before this answer started (the
  // caller marked itself answering, then the peer cancelled) ends it too.
  absl::Status result;
  if (!ContinueAnswer(&result)) {
    *pending = true;
    return absl::OkStatus();
  }
  answer_.answered = nullptr;
  return result;
}

bool WorkerStream::ContinueAnswer(absl::Status* result) {
  Answer& a = answer_;
  const bool sync = job_->mode() == JobShard::Mode::kSync;
  auto resume = [this](absl::Status s) { Resumed(std::move(s)); };
  auto end = [&](absl::Status s) {
    completed_.clear();
    *result = std::move(s);
    return true;
  };
  while (sync && a.next < completed_.size()) {
    const int32_t partition = completed_[a.next];
    {
      absl::MutexLock lock(&answer_mu_);
      if (!cancelled_.ok()) return end(cancelled_);
      uint64_t id = 0;
      std::optional<absl::Status> now = job_->OnVersion(
          partition, a.clock, generation_, members_, resume, &id);
      if (!now) {
        waiting_ = Waiting::kVersion;
        waiting_partition_ = partition;
        wait_id_ = id;
        a.wait_started = absl::Now();
        return false;
      }
      if (!now->ok()) return end(*now);
    }
    if (absl::Status s =
            SendPartition(partition, a.clock, NextReady(a.next, a.clock));
        !s.ok())
      return end(s);
    ++a.next;
  }
  if (!a.read_done) {
    absl::MutexLock lock(&answer_mu_);
    if (!cancelled_.ok()) return end(cancelled_);
    uint64_t id = 0;
    std::optional<absl::StatusOr<int64_t>> now = job_->clocks().OnRead(
        a.clock, job_->read_bound(), generation_,
        [this](absl::StatusOr<int64_t> r) {
          if (r.ok()) ReadDone(*r);
          Resumed(r.status());
        },
        &id);
    if (!now) {
      waiting_ = Waiting::kRead;
      wait_id_ = id;
      a.wait_started = absl::Now();
      return false;
    }
    if (!now->ok()) return end(now->status());
    ReadDone(**now);
  }
  if (metrics_.barrier_wait_seconds != nullptr)
    metrics_.barrier_wait_seconds->Observe(absl::ToDoubleSeconds(a.waited));
  return end(sync ? absl::OkStatus() : SendAll(a.clock));
}

void WorkerStream::ReadDone(int64_t staleness) {
  answer_.read_done = true;
  if (metrics_.staleness != nullptr)
    metrics_.staleness->Observe(static_cast<double>(staleness));
}

void WorkerStream::Resumed(absl::Status s) {
  {
    absl::MutexLock lock(&answer_mu_);
    waiting_ = Waiting::kNone;
  }
  answer_.waited += absl::Now() - answer_.wait_started;
  absl::Status result;
  if (!s.ok()) {
    completed_.clear();
    result = std::move(s);
  } else if (!ContinueAnswer(&result)) {
    return;  // waits again
  }
  std::function<void(absl::Status)> answered = std::move(answer_.answered);
  answer_.answered = nullptr;
  answered(std::move(result));
}

bool WorkerStream::CancelAnswer(absl::StatusCode code, absl::Status* why) {
  absl::MutexLock lock(&answer_mu_);
  const absl::Status status = WaitEnded(code);
  bool removed = false;
  if (waiting_ == Waiting::kVersion) {
    removed = job_->CancelVersionWait(waiting_partition_, wait_id_);
  } else if (waiting_ == Waiting::kRead) {
    removed = job_->clocks().CancelRead(wait_id_);
  }
  if (!removed) {
    cancelled_ = status;  // the running continuation ends with it
    return false;
  }
  waiting_ = Waiting::kNone;
  completed_.clear();
  answer_.answered = nullptr;
  *why = status;
  return true;
}

absl::Status WorkerStream::WaitEnded(absl::StatusCode code) const {
  if (code != absl::StatusCode::kDeadlineExceeded)
    return absl::Status(code, "stream cancelled");
  if (waiting_ == Waiting::kVersion) {
    return absl::DeadlineExceededError(absl::StrCat(
        "partition ", waiting_partition_, " has not reached version ",
        answer_.clock, " within the step timeout (",
        absl::FormatDuration(options_.step_timeout), ")"));
  }
  if (waiting_ == Waiting::kNone) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the read's answer took longer than the step timeout (",
        absl::FormatDuration(options_.step_timeout), ")"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "read at clock ", answer_.clock,
      " still waits for the slowest worker at clock ",
      job_->clocks().MinClock()));
}

absl::Status WorkerStream::AnswerRead(int64_t clock) {
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  const bool sync = job_->mode() == JobShard::Mode::kSync;
  absl::Duration waited;
  if (sync) {
    for (size_t i = 0; i < completed_.size(); ++i) {
      const absl::Time start = absl::Now();
      RETURN_IF_ERROR(job_->WaitForVersion(completed_[i], clock, generation_,
                                           deadline, options_.cancelled,
                                           members_));
      waited += absl::Now() - start;
      // Held for the next one only when that one is ready too (no wait).
      RETURN_IF_ERROR(SendPartition(completed_[i], clock, NextReady(i, clock)));
    }
  }
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(const int64_t staleness,
                   job_->clocks().WaitForRead(clock, job_->read_bound(),
                                              deadline, options_.cancelled,
                                              generation_));
  waited += absl::Now() - start;
  if (metrics_.barrier_wait_seconds != nullptr) {
    metrics_.barrier_wait_seconds->Observe(absl::ToDoubleSeconds(waited));
    metrics_.staleness->Observe(static_cast<double>(staleness));
  }
  if (sync) return absl::OkStatus();
  return SendAll(clock);
}

}  // namespace fulcrum
