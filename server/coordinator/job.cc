#include "server/coordinator/job.h"

#include <algorithm>

namespace fulcrum {

const char* PhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kWaiting:
      return "waiting";
    case JobPhase::kStarting:
      return "starting";
    case JobPhase::kRecovering:
      return "recovering";
    case JobPhase::kRunning:
      return "running";
    case JobPhase::kReconfiguring:
      return "reconfiguring";
    case JobPhase::kFinishing:
      return "finishing";
    case JobPhase::kEnded:
      return "ended";
  }
  return "?";
}

Job::Job(const std::string& id, v1::JobSpec spec, absl::Time submitted) {
  status.set_job_id(id);
  *status.mutable_spec() = std::move(spec);
  status.set_state(v1::PENDING);
  status.set_submit_time_unix(absl::ToDoubleSeconds(submitted - absl::UnixEpoch()));
  if (status.spec().dataset().sharding() == "chunks") {
    chunks = std::make_unique<ChunkTable>(status.spec().dataset().chunk_size(),
                                          status.spec().epochs());
  }
}

void Job::SetPhase(JobPhase p, v1::JobState ended) {
  phase = p;
  if (p == JobPhase::kEnded) {
    status.set_state(ended);
  } else {
    status.set_state(running() ? v1::RUNNING : v1::PENDING);
  }
}

bool Job::in_generation(const std::string& worker) const {
  return std::find(status.workers().begin(), status.workers().end(), worker) !=
         status.workers().end();
}

}  // namespace fulcrum
