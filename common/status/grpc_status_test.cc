#include "common/status/grpc_status.h"

#include "common/status/status_macros.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(GrpcStatusTest, RoundTripsCodeAndMessage) {
  absl::Status s = absl::InvalidArgumentError("optimizer.lr must be > 0");
  grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(g.error_message(), "optimizer.lr must be > 0");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(
      FromGrpcStatus(grpc::Status(grpc::StatusCode::ABORTED, "gen")).code(),
      absl::StatusCode::kAborted);
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(*out, Half(h));
  RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

TEST(StatusMacrosTest, PropagatesErrorsAndValues) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(Quarter(6, &out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fulcrum
