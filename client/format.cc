#include "client/format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace fulcrum {

std::string ProgressLine(const v1::JobStatus& s) {
  const v1::Progress& p = s.progress();
  const int64_t total = p.total_steps();
  std::string bar;
  if (total > 0) {
    const int width = 20;
    const int filled =
        static_cast<int>(std::min<int64_t>(width, p.step() * width / total));
    bar = absl::StrCat("[", std::string(filled, '#'),
                       std::string(width - filled, '.'), "] ");
  }
  std::string line =
      absl::StrFormat("%s %-9s %sepoch %d/%d step %d", s.job_id(),
                      v1::JobState_Name(s.state()), bar, p.epoch() + 1,
                      s.spec().epochs(), p.step());
  // External models' workers know no step count in advance.
  if (total > 0) absl::StrAppendFormat(&line, "/%d", total);
  if (p.step() > 0 && p.loss() != 0.0)
    absl::StrAppendFormat(&line, " loss %.4f", p.loss());
  if (p.evaluated_step() > 0) {
    absl::StrAppendFormat(&line, " acc %.4f@%d", p.test_accuracy(),
                          p.evaluated_step());
  }
  if (p.step() > 0 && p.step_compute_ms() + p.step_wait_ms() > 0) {
    absl::StrAppendFormat(&line, " step %.1f+%.1fms", p.step_compute_ms(),
                          p.step_wait_ms());
  }
  if (s.spec().checkpoint().every_steps() > 0) {
    absl::StrAppendFormat(&line, " ckpt %d", s.checkpoint_step());
  }
  if (s.spec().consistency().mode() != "sync" && s.staleness().reads() > 0) {
    absl::StrAppendFormat(&line, " staleness %.2f/%d", s.staleness().mean(),
                          s.staleness().max());
  }
  if (s.stalls_size() > 0) {
    const v1::Stall& worst =
        *std::max_element(s.stalls().begin(), s.stalls().end(),
                          [](const v1::Stall& a, const v1::Stall& b) {
                            return a.waited_seconds() < b.waited_seconds();
                          });
    absl::StrAppendFormat(&line, " STALLED %.0fs at step %d waiting for %s",
                          worst.waited_seconds(), worst.step(),
                          absl::StrJoin(worst.waiting_for(), ","));
  }
  absl::StrAppendFormat(&line, " %.0f samples/s workers %d/%d",
                        p.samples_per_sec(), s.live_workers(),
                        s.workers_size());
  if (s.preparing_size() > 0)
    absl::StrAppendFormat(&line, " (+%d preparing)", s.preparing_size());
  // A pending job says what it waits for ("waiting for 2 shards ...").
  if (s.state() == v1::PENDING && !s.message().empty())
    absl::StrAppend(&line, " - ", s.message());
  return line;
}

std::string FinalLines(const v1::JobStatus& s) {
  std::string out = absl::StrFormat("%s %s: %s\n", s.job_id(),
                                    v1::JobState_Name(s.state()), s.message());
  if (s.end_time_unix() > 0 && s.start_time_unix() > 0) {
    absl::StrAppendFormat(&out, "training time: %.1f s\n",
                          s.end_time_unix() - s.start_time_unix());
  }
  if (s.spec().consistency().mode() != "sync" && s.staleness().reads() > 0) {
    absl::StrAppendFormat(
        &out, "staleness of %d reads: mean %.2f, max %d; histogram [%s]\n",
        s.staleness().reads(), s.staleness().mean(), s.staleness().max(),
        absl::StrJoin(s.staleness().histogram(), " "));
  }
  if (s.progress().evaluated_step() > 0) {
    absl::StrAppendFormat(&out, "final test accuracy: %.4f\n",
                          s.progress().test_accuracy());
  }
  return out;
}

std::string EventLines(const v1::JobStatus& s) {
  std::string out;
  for (const v1::MembershipEvent& e : s.events()) {
    const absl::Time t =
        absl::FromUnixMicros(static_cast<int64_t>(e.time_unix() * 1e6));
    const std::string when =
        absl::FormatTime("%H:%M:%S", t, absl::LocalTimeZone());
    if (e.kind() == "restored") {
      absl::StrAppendFormat(&out, "  %s restored checkpoint of step %d (generation %d)\n",
                            when, e.step(), e.generation());
    } else if (e.kind() == "checkpoint_rejected") {
      absl::StrAppendFormat(&out, "  %s checkpoint of step %d rejected (generation %d)\n",
                            when, e.step(), e.generation());
    } else if (e.kind() == "joined" && e.step() > 0) {
      absl::StrAppendFormat(&out, "  %s joined %s at step %d (generation %d)\n",
                            when, e.member_id(), e.step(), e.generation());
    } else {
      absl::StrAppendFormat(&out, "  %s %s %s (generation %d)\n", when,
                            e.kind(), e.member_id(), e.generation());
    }
  }
  return out;
}

std::string DataLines(const v1::JobStatus& s) {
  std::string out;
  const v1::EpochSummary& earlier = s.earlier_epochs();
  if (earlier.count() > 0) {
    absl::StrAppendFormat(
        &out, "  epochs 0-%d: %d of %d exactly once (%d of %d samples)\n",
        earlier.count() - 1, earlier.exactly_once(), earlier.count(),
        earlier.trained(), earlier.total());
  }
  for (const v1::EpochSamples& e : s.epochs()) {
    absl::StrAppendFormat(&out, "  epoch %d: %d of %d samples trained\n",
                          e.epoch(), e.trained(), e.total());
  }
  return out;
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE (is the coordinator running?)";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    default:
      return "ERROR";
  }
}

}  // namespace fulcrum
