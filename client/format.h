// Human-readable renderings of job status for fulcrumctl.
#ifndef FULCRUM_CLIENT_FORMAT_H_
#define FULCRUM_CLIENT_FORMAT_H_

#include <grpcpp/support/status_code_enum.h>

#include <string>

#include "fulcrum/v1/coordinator.pb.h"

namespace fulcrum {

// One line: state, epoch, step with a progress bar, loss, accuracy,
// throughput and live workers.
std::string ProgressLine(const v1::JobStatus& status);
// What a finished job ends with, including "final test accuracy: 0.XXXX".
std::string FinalLines(const v1::JobStatus& status);
// The job's membership events, one per line ("  10:42:07 joined w-1 (generation
// 1)").
std::string EventLines(const v1::JobStatus& status);
// Samples trained per epoch (chunk sharding), one line each.
std::string DataLines(const v1::JobStatus& status);
const char* StatusCodeName(grpc::StatusCode code);

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_FORMAT_H_
