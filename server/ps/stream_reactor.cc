#include "server/ps/stream_reactor.h"

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/dataplane/shm_ring.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"
#include "server/ps/service.h"

namespace fulcrum {

StreamReactor::StreamReactor(ParameterServerService* service,
                             grpc::CallbackServerContext* context)
    : service_(service),
      context_(context),
      deadline_(absl::Now() + service->options_.hello_timeout) {
  service_->reactors_.fetch_add(1);
  const absl::Status s =
      service_->Admit(&deadline_, [this] { Expired(); }, &watch_);
  if (!s.ok()) {
    End(s);
    return;
  }
  admitted_ = true;
  StartRead(&request_);
}

StreamReactor::~StreamReactor() {
  // The stream's parts first: they may still count metrics.
  stream_.reset();
  writer_.reset();
  segment_.reset();
  service_->reactors_.fetch_sub(1);
}

void StreamReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The worker half-closed, or the call was cancelled (its transport,
    // or our TryCancel at the hello's or the idle deadline). On rings a
    // half-close follows the request ring's close, which the ring thread
    // reads after the last push: it ends the stream.
    if (rings_ && !context_->IsCancelled()) return;
    absl::Status s;
    if (context_->IsCancelled()) {
      s = absl::DeadlineExceededError(
          stream_ == nullptr
              ? absl::StrCat("no hello within ",
                             absl::FormatDuration(
                                 service_->options_.hello_timeout))
              : absl::StrCat("no message within ",
                             absl::FormatDuration(
                                 service_->options_.idle_timeout)));
    }
    End(std::move(s));
    return;
  }
  if (rings_) {
    // On rings every request goes through the request ring.
    End(absl::InvalidArgumentError(
        "a message on the gRPC stream of a stream on rings (after the "
        "hello, requests go through the request ring)"));
    return;
  }
  deadline_.Set(absl::InfiniteFuture());
  absl::Status s = FromGrpcStatus(request_.parse_error);
  bool pending = false;
  if (s.ok() && stream_ == nullptr) {
    s = Hello();
    if (s.ok() && rings_) {
      // The thread reads the ring; the reactor watches gRPC for the end.
      {
        absl::MutexLock lock(&mu_);
        ring_thread_ = true;
        StartRead(&request_);
      }
      std::thread([this] { RingLoop(); }).detach();
      return;
    }
  } else if (s.ok()) {
    next_push_ = 0;
    s = Pushes(&pending);
  }
  if (!s.ok()) {
    End(std::move(s));
    return;
  }
  if (!pending) NextRead();
}

absl::Status StreamReactor::Hello() {
  if (!request_.message.has_hello()) {
    return absl::FailedPreconditionError(
        "the first message of a stream must be hello");
  }
  const v1::Hello& hello = request_.message.hello();
  ASSIGN_OR_RETURN(const StreamHello admitted, service_->AdmitHello(hello));
  if (hello.has_shm()) segment_ = service_->MapSegment(hello, &slots_);
  if (segment_ != nullptr && hello.shm().ring_bytes() != 0) {
    ASSIGN_OR_RETURN(StreamRings in,
                     StreamRings::In(*segment_, hello.shm().ring_bytes()));
    rings_.emplace(std::move(in));
  }
  auto stopped = [this] { return Stopped(); };
  FrameSink* sink = this;
  writer_ = std::make_unique<FrameParamsWriter>(sink, segment_.get(), &slots_);
  // The first message (the initial values) goes over gRPC, saying so.
  if (rings_) {
    writer_->UseRing(&rings_->responses, service_->options_.step_timeout,
                     stopped);
  }
  WorkerStream::Options options;
  options.step_timeout = service_->options_.step_timeout;
  options.metrics = service_->metrics_;
  options.cancelled = stopped;  // the ring thread's blocking waits
  ASSIGN_OR_RETURN(stream_, WorkerStream::Open(*service_->shard_, admitted,
                                               std::move(options),
                                               writer_.get()));
  return absl::OkStatus();
}

absl::Status StreamReactor::Pushes(bool* pending) {
  const v1::StreamRequest& m = request_.message;
  auto push = [this, pending]() {
    {
      absl::MutexLock lock(&mu_);
      answering_ = true;  // its callback may come before PushAsync returns
    }
    deadline_.Set(absl::Now() + service_->options_.step_timeout);
    absl::Status s = stream_->PushAsync(
        chunk_, [this](absl::Status a) { Answered(std::move(a)); }, pending);
    if (!*pending) {
      absl::MutexLock lock(&mu_);
      answering_ = false;
    }
    return s;
  };
  // more[]: pushes of the same batch, through the segment.
  if (next_push_ == 0) RETURN_IF_ERROR(CheckPushes(m, segment_.get()));
  while (next_push_ < PushCount(m)) {
    RETURN_IF_ERROR(PushAt(request_, next_push_++, segment_.get(), &chunk_));
    RETURN_IF_ERROR(push());
    RETURN_IF_ERROR(CheckSegment(segment_.get()));
    if (*pending) return absl::OkStatus();
  }
  return absl::OkStatus();
}

void StreamReactor::RingLoop() {
  absl::Status s = service_->ServePushes(
      [this] { return Stopped(); }, &deadline_, segment_.get(), *stream_,
      [this](RequestFrame* r) {
        return ReadRingRequest(rings_->requests, [this] { return Stopped(); },
                               r);
      });
  // However it ended, the worker reading the response ring hears it now.
  rings_->responses.Close();
  bool gone;
  {
    absl::MutexLock lock(&mu_);
    ring_thread_ = false;
    EndLocked(std::move(s));
    gone = DeletableLocked();
  }
  if (gone) delete this;
}

bool StreamReactor::Stopped() {
  if (ring_stop_.load()) return true;
  // The context lives until OnDone returns: looked at under the lock
  // OnDone takes, never after. (A leaf lock: blocking waits call this
  // under a partition's lock.)
  absl::MutexLock lock(&context_mu_);
  return context_gone_ || context_->IsCancelled();
}

void StreamReactor::NextRead() {
  absl::MutexLock lock(&mu_);
  if (end_) return;
  deadline_.Set(absl::Now() + service_->options_.idle_timeout);
  StartRead(&request_);
}

void StreamReactor::Answered(absl::Status s) {
  bool go_on = false;
  bool gone = false;
  {
    absl::MutexLock lock(&mu_);
    answering_ = false;
    if (expired_ && s.ok()) {
      // The deadline passed while the answer went on: the stream ends
      // (its one watchdog entry has fired).
      s = absl::DeadlineExceededError(absl::StrCat(
          "the read's answer took longer than the step timeout (",
          absl::FormatDuration(service_->options_.step_timeout), ")"));
    }
    if (!s.ok() && !end_ && !done_) {
      EndLocked(s);
    }
    // Ended meanwhile (a deadline, the peer): nothing more to do here.
    go_on = !end_ && !done_;
    processing_ = go_on;
    gone = DeletableLocked();
  }
  if (gone) delete this;
  if (!go_on) return;
  bool pending = false;
  if (s.ok()) s = Pushes(&pending);  // the rest of the message's more[]
  if (!s.ok()) {
    End(std::move(s));
  } else if (!pending) {
    NextRead();
  }
  {
    absl::MutexLock lock(&mu_);
    processing_ = false;
    gone = DeletableLocked();
  }
  if (gone) delete this;
}

void StreamReactor::Expired() {
  {
    absl::MutexLock lock(&mu_);
    if (end_) return;
    if (answering_) {
      expired_ = true;
      absl::Status why;
      if (stream_->CancelAnswer(absl::StatusCode::kDeadlineExceeded, &why)) {
        answering_ = false;
        EndLocked(std::move(why));
      }
      // Otherwise the answer is going on and ends with the deadline at its
      // next wait (or ends well).
      return;
    }
  }
  // A read is outstanding: cancel it, as the synchronous handler does.
  context_->TryCancel();
}

void StreamReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  if (!answering_ || end_) return;  // the read's OnReadDone(false) ends it
  absl::Status why;
  if (stream_->CancelAnswer(absl::StatusCode::kCancelled, &why)) {
    answering_ = false;
    EndLocked(std::move(why));
  }
}

bool StreamReactor::Write(const ResponseFrame& frame) {
  auto copy = std::make_unique<ResponseFrame>();
  copy->message = frame.message;
  if (frame.out_bytes != 0) {
    if (frame.out_data == frame.small) {
      std::memcpy(copy->Reserve(frame.out_bytes), frame.small,
                  frame.out_bytes);
    } else {
      copy->out = frame.out;  // a reference to the writer's fresh slice
      copy->out_data = frame.out_data;
      copy->out_bytes = frame.out_bytes;
    }
  }
  copy->more_out = frame.more_out;  // references, as `out`
  absl::MutexLock lock(&mu_);
  if (write_failed_ || (end_ && !end_->ok())) return false;
  queue_.push_back(std::move(copy));
  if (!writing_) {
    writing_ = true;
    StartWrite(queue_.front().get());
  }
  return true;
}

void StreamReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  queue_.pop_front();
  writing_ = false;
  if (!ok) {
    write_failed_ = true;
    queue_.clear();
    EndLocked(absl::UnavailableError("peer closed the stream"));
    MaybeFinishLocked();  // when it had ended already, waiting for us
    return;
  }
  if (end_ && !end_->ok()) queue_.clear();
  if (!queue_.empty()) {
    writing_ = true;
    StartWrite(queue_.front().get());
    return;
  }
  MaybeFinishLocked();
}

void StreamReactor::End(absl::Status s) {
  absl::MutexLock lock(&mu_);
  EndLocked(std::move(s));
}

void StreamReactor::EndLocked(absl::Status s) {
  if (end_) return;
  if (!s.ok() && s.code() != absl::StatusCode::kCancelled) {
    service_->metrics_->Rejected(
        absl::AsciiStrToLower(absl::StatusCodeToString(s.code())));
  }
  end_ = std::move(s);
  ring_stop_ = true;
  // An error drops what is queued; the write in flight completes first.
  if (!end_->ok() && queue_.size() > 1) queue_.resize(1);
  if (!end_->ok() && !writing_) queue_.clear();
  MaybeFinishLocked();
}

void StreamReactor::MaybeFinishLocked() {
  if (!end_ || finished_ || writing_) return;
  finished_ = true;
  Finish(ToGrpcStatus(*end_));
}

void StreamReactor::OnDone() {
  if (admitted_) service_->Leave(watch_);  // no Expired() after this
  {
    absl::MutexLock lock(&context_mu_);
    context_gone_ = true;  // the ring thread looks at it no more
  }
  bool gone;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    absl::Status why;
    // Still waiting: never called back. Otherwise Answered deletes.
    if (answering_ &&
        stream_->CancelAnswer(absl::StatusCode::kCancelled, &why)) {
      answering_ = false;
    }
    gone = DeletableLocked();
  }
  if (gone) delete this;
}

}  // namespace fulcrum
