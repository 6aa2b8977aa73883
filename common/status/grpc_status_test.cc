#include "common/status/grpc_status.h"

#include "common/status/payloads.h"
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

// Payloads (what a core marks on an error) cross with the status; a
// prefix keeps them; a peer's undecodable details are dropped.
TEST(GrpcStatusTest, PayloadsCrossAndSurviveAPrefix) {
  absl::Status s = absl::InvalidArgumentError("push.data of step 7: refused");
  s.SetPayload(kRefusedUpdatePayload, absl::Cord("7"));
  const grpc::Status g = ToGrpcStatus(s);
  EXPECT_FALSE(g.error_details().empty());
  const absl::Status back = FromGrpcStatus(g);
  EXPECT_EQ(back, s);  // code, message and payloads
  const absl::Status prefixed = Prefixed("shard 0 (127.0.0.1:1)", back);
  EXPECT_EQ(prefixed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(prefixed.message(),
            "shard 0 (127.0.0.1:1): push.data of step 7: refused");
  ASSERT_TRUE(prefixed.GetPayload(kRefusedUpdatePayload).has_value());
  EXPECT_EQ(std::string(*prefixed.GetPayload(kRefusedUpdatePayload)), "7");
  // No payload: no details.
  EXPECT_TRUE(ToGrpcStatus(absl::AbortedError("gen")).error_details().empty());
  // Garbage from a peer: the code and message, nothing else.
  const absl::Status garbage = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::INTERNAL, "x", std::string("\xff\xff")));
  EXPECT_EQ(garbage, absl::InternalError("x"));
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
