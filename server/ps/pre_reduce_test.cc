// Local pre-reduction on the shard (wire.pre_reduce): a push that stands
// for several members of the generation - their summed gradient with each
// one's samples and range - updates the parameters and the data ledger
// exactly as the members' own pushes would, exactly once, and a stream
// admits a group only in a sync job, with each member named once.
#include <vector>

#include "gtest/gtest.h"
#include "server/ps/parameter_shard.h"
#include "server/ps/testing/test_jobs.h"
#include "server/ps/worker_stream.h"

namespace fulcrum {
namespace {

using testing::Chunk;
using testing::Completed;
using testing::ReadAll;
using testing::RecordingWriter;
using testing::TinyJob;

// Members b and c's gradients (3 samples of mean 1, 1 sample of mean 5)
// pre-reduced: the samples-weighted mean with their summed samples.
PushChunk GroupChunk(int64_t step, const std::vector<float>& mean) {
  PushChunk c = Chunk(step, mean, 4);
  c.shares = {{3, DataRange{7, 0, 3}}, {1, DataRange{8, 10, 11}}};
  return c;
}

TEST(PreReduceTest, AGroupPushUpdatesAsItsMembersPushesWould) {
  std::vector<float> ga(10, 2.0f), gb(10, 1.0f), gc(10, 5.0f);
  std::vector<float> mean(10, (3 * 1.0f + 1 * 5.0f) / 4);

  // Reference: each of a, b, c pushes its own gradient.
  auto alone = JobShard::Create(TinyJob({"a", "b", "c"}));
  ASSERT_TRUE(alone.ok()) << alone.status();
  PushChunk own_a = Chunk(0, ga, 2);
  own_a.range = {6, 0, 2};
  PushChunk own_b = Chunk(0, gb, 3);
  own_b.range = {7, 0, 3};
  PushChunk own_c = Chunk(0, gc, 1);
  own_c.range = {8, 10, 11};
  ASSERT_TRUE(Completed((*alone)->Push(0, own_a)));
  ASSERT_TRUE(Completed((*alone)->Push(1, own_b)));
  ASSERT_TRUE(Completed((*alone)->Push(2, own_c)));

  auto grouped = JobShard::Create(TinyJob({"a", "b", "c"}));
  ASSERT_TRUE(grouped.ok());
  ASSERT_TRUE(Completed((*grouped)->Push(0, own_a)));
  const std::vector<int> group = {1, 2};
  int64_t version = -1;
  ReadAll(**grouped, &version);
  EXPECT_EQ(version, 0);  // b and c have not pushed
  ASSERT_TRUE(Completed((*grouped)->Push(group, GroupChunk(0, mean))));

  std::vector<float> want = ReadAll(**alone);
  std::vector<float> got = ReadAll(**grouped, &version);
  EXPECT_EQ(version, 1);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
  Ledger want_ledger, got_ledger;
  ASSERT_TRUE((*alone)->Ledger(&want_ledger));
  ASSERT_TRUE((*grouped)->Ledger(&got_ledger));
  EXPECT_EQ(got_ledger, want_ledger);
  EXPECT_EQ(got_ledger.size(), 3u);  // a's, b's and c's chunks
}

TEST(PreReduceTest, ARepeatedGroupPushIsNotAppliedTwice) {
  auto job = JobShard::Create(TinyJob({"a", "b", "c"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> g(10, 1.0f);
  const std::vector<int> group = {1, 2};
  ASSERT_TRUE(Completed((*job)->Push(group, GroupChunk(0, g))));
  auto again = (*job)->Push(group, GroupChunk(0, g));  // a re-opened stream
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, PushOutcome::kAlreadyComplete);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 4))));
  int64_t version;
  std::vector<float> w1 = ReadAll(**job, &version);
  EXPECT_EQ(version, 1);
  auto late = (*job)->Push(group, GroupChunk(0, g));  // after the step
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(*late, PushOutcome::kAlreadyComplete);
  EXPECT_EQ(ReadAll(**job), w1);
}

TEST(PreReduceTest, AGroupMemberWithoutSamplesCountsAsItsEmptyPush) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 2.0f);
  PushChunk c = Chunk(0, g, 5);
  c.shares = {{0, DataRange{}}, {5, DataRange{3, 0, 5}}};
  ASSERT_TRUE(Completed((*job)->Push(std::vector<int>{0, 1}, c)));
  int64_t version;
  std::vector<float> w1 = ReadAll(**job, &version);
  EXPECT_EQ(version, 1);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 1.0f);  // lr 0.5
}

TEST(PreReduceTest, BadGroupPushesChangeNothing) {
  auto job = JobShard::Create(TinyJob({"a", "b", "c"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 1.0f);
  const std::vector<int> group = {1, 2};

  PushChunk not_sum = GroupChunk(0, g);
  not_sum.samples = 5;
  absl::Status s = (*job)->Push(group, not_sum).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("push.shares"), std::string::npos) << s;

  PushChunk one_share = GroupChunk(0, g);
  one_share.shares.pop_back();
  one_share.samples = 3;
  s = (*job)->Push(group, one_share).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("push.shares"), std::string::npos) << s;

  PushChunk own_range = GroupChunk(0, g);
  own_range.range = {1, 0, 4};
  s = (*job)->Push(group, own_range).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("push.range"), std::string::npos) << s;

  PushChunk bad_share = GroupChunk(0, g);
  bad_share.shares[1].range = {-5, 0, 1};
  s = (*job)->Push(group, bad_share).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("push.shares[1].range"), std::string::npos) << s;

  // Shares on a one-member push.
  PushChunk shared = GroupChunk(0, g);
  s = (*job)->Push(0, shared).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);

  // c pushed the step on its own stream: the group may not push it again.
  ASSERT_TRUE(Completed((*job)->Push(2, Chunk(0, g, 1))));
  s = (*job)->Push(group, GroupChunk(0, g)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;

  // None of it counted for b: the step still waits for a and b.
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  int64_t version;
  EXPECT_EQ(ReadAll(**job, &version), w0);
  EXPECT_EQ(version, 0);
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  ReadAll(**job, &version);
  EXPECT_EQ(version, 1);
}

absl::StatusOr<std::unique_ptr<WorkerStream>> OpenGroup(
    ParameterShard& shard, std::vector<std::string> group,
    RecordingWriter* writer) {
  StreamHello hello{"job-1", "a", 1};
  hello.group = std::move(group);
  WorkerStream::Options options;
  options.step_timeout = absl::Seconds(10);
  return WorkerStream::Open(shard, hello, options, writer);
}

TEST(PreReduceTest, AStreamAdmitsAGroupOfDistinctMembersInSyncJobsOnly) {
  ParameterShard shard;
  ASSERT_TRUE(shard.InitJob(TinyJob({"a", "b", "c"})).ok());
  RecordingWriter writer;
  auto twice = OpenGroup(shard, {"b", "b"}, &writer);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("hello.group"), std::string::npos);
  auto own = OpenGroup(shard, {"a"}, &writer);
  EXPECT_EQ(own.status().code(), absl::StatusCode::kInvalidArgument);
  auto stranger = OpenGroup(shard, {"z"}, &writer);
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(writer.sent.empty());

  // The group's stream: one push for a, b and c completes the step and
  // answers its read.
  auto stream = OpenGroup(shard, {"b", "c"}, &writer);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const size_t initial = writer.sent.size();
  EXPECT_GT(initial, 0u);
  std::vector<float> g(10, 1.0f);
  PushChunk unshared = Chunk(0, g, 3);
  EXPECT_EQ((*stream)->Push(unshared).code(),
            absl::StatusCode::kInvalidArgument);  // no shares
  PushChunk c = Chunk(0, g, 3);
  c.shares = {{1, DataRange{}}, {1, DataRange{}}, {1, DataRange{}}};
  ASSERT_TRUE((*stream)->Push(c).ok());
  ASSERT_GT(writer.sent.size(), initial);
  EXPECT_EQ(writer.sent.back().version, 1);

  ParameterShard async_shard;
  JobInit async = TinyJob({"a", "b"});
  async.spec.mutable_consistency()->set_mode("async");
  ASSERT_TRUE(async_shard.InitJob(async).ok());
  auto refused = OpenGroup(async_shard, {"b"}, &writer);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("hello.group"), std::string::npos);
}

}  // namespace
}  // namespace fulcrum
