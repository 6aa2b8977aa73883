#include "common/status/grpc_status.h"

#include <string>

#include "fulcrum/v1/common.pb.h"

namespace fulcrum {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  v1::StatusPayloads details;
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& value) {
    (*details.mutable_payloads())[std::string(url)] = std::string(value);
  });
  return grpc::Status(
      static_cast<grpc::StatusCode>(status.code()),
      std::string(status.message()),
      details.payloads().empty() ? std::string() : details.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message());
  v1::StatusPayloads details;
  if (!status.error_details().empty() &&
      details.ParseFromString(status.error_details())) {
    for (const auto& [url, value] : details.payloads())
      out.SetPayload(url, absl::Cord(value));
  }
  return out;
}

}  // namespace fulcrum
