// Structured marks on errors (absl::Status payloads) that a caller acts on
// besides the code, and keeping them when an error is annotated. They cross
// gRPC with the status (grpc_status.h). Network-free: cores use it.
#ifndef FULCRUM_COMMON_STATUS_PAYLOADS_H_
#define FULCRUM_COMMON_STATUS_PAYLOADS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fulcrum {

// The shard refused a step's update (it would have made values non-finite)
// and blames the stream that receives this error; the value is the step.
// A pre-reducing group leader passes the blame to the member whose gradient
// held the largest element.
inline constexpr char kRefusedUpdatePayload[] = "fulcrum/refused-update";

// The coordinator's: a shard could not restore the checkpoint of the step
// it carries (a later round falls back to an earlier one).
inline constexpr char kBadCheckpointPayload[] = "fulcrum/bad-checkpoint";

// A refused update's error: INVALID_ARGUMENT with `message`, marked
// kRefusedUpdatePayload = `step`.
inline absl::Status RefusedUpdateError(absl::string_view message,
                                       int64_t step) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kRefusedUpdatePayload, absl::Cord(absl::StrCat(step)));
  return s;
}

// `status` with "prefix: " before its message; code and payloads kept.
inline absl::Status Prefixed(absl::string_view prefix,
                             const absl::Status& status) {
  if (status.ok()) return status;
  absl::Status out(status.code(),
                   absl::StrCat(prefix, ": ", status.message()));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& value) {
    out.SetPayload(url, value);
  });
  return out;
}

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_STATUS_PAYLOADS_H_
