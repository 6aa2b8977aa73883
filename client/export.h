// `fulcrumctl export`: pulls a job's current parameters from its shards and
// writes them as a model file (common/tensor/model_file.h).
#ifndef FULCRUM_CLIENT_EXPORT_H_
#define FULCRUM_CLIENT_EXPORT_H_

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "common/tensor/model_file.h"
#include "fulcrum/v1/coordinator.pb.h"

namespace fulcrum {

// Every partition must arrive whole and all at one version, else
// FAILED_PRECONDITION (the job is still training: export it once it ended).
absl::StatusOr<ModelFile> PullModel(const v1::JobStatus& job,
                                    std::chrono::milliseconds timeout);

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_EXPORT_H_
