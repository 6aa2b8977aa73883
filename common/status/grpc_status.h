// Conversions between absl::Status (used by every core) and grpc::Status
// (used only by thin service and client layers). Codes map one to one;
// payloads travel in error_details (a v1::StatusPayloads), so that what a
// core marks on an error (payloads.h) reaches the core on the other side.
// Details that do not decode are dropped, never an error.
#ifndef FULCRUM_COMMON_STATUS_GRPC_STATUS_H_
#define FULCRUM_COMMON_STATUS_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace fulcrum {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_STATUS_GRPC_STATUS_H_
