// FromPush: a push as received, checked field by field into a PushChunk.
#include "server/ps/stream_frames.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// A range that is set must name a chunk: a sent chunk -1 passed for "no
// range" (issue 40, item 8).
TEST(StreamFramesTest, ASetRangeNamesAChunk) {
  v1::Push push;
  push.set_samples(1);
  push.mutable_range()->set_chunk(-1);
  push.mutable_range()->set_end(4);
  PushChunk out;
  absl::Status s = FromPush(push, Payload(), nullptr, &out, "push");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "push.range.chunk must be >= 0, got -1");

  push.mutable_range()->set_chunk(0);
  ASSERT_TRUE(FromPush(push, Payload(), nullptr, &out, "push").ok());
  EXPECT_EQ(out.range.chunk, 0);
  EXPECT_EQ(out.range.end, 4);

  push.clear_range();
  v1::Share* share = push.add_shares();
  share->set_samples(1);
  share->mutable_range()->set_chunk(-3);
  s = FromPush(push, Payload(), nullptr, &out, "more[2]");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "more[2].shares[0].range.chunk must be >= 0, got -3");

  push.clear_shares();
  ASSERT_TRUE(FromPush(push, Payload(), nullptr, &out, "push").ok());
  EXPECT_EQ(out.range.chunk, -1) << "unset: no range";
}

}  // namespace
}  // namespace fulcrum
