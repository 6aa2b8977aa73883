// The generation round on its own: phases in order, the restore probe, and
// a checkpoint that fails to load named in the failure.
#include "server/coordinator/round.h"

#include "gtest/gtest.h"
#include "server/coordinator/testing/fake_shards.h"

namespace fulcrum {
namespace {

RoundPlan Plan(bool restore) {
  RoundPlan plan;
  plan.job_id = "job-1";
  plan.generation = 3;
  plan.workers = {"w-1", "w-2"};
  plan.addresses = {"127.0.0.1:1", "127.0.0.1:2"};
  plan.restore = restore;
  return plan;
}

TEST(RoundTest, AdoptsThenAlignsToTheLowestVersion) {
  testing::FakeShards shards;
  shards.versions = {{"127.0.0.1:1", 12}, {"127.0.0.1:2", 11}};
  shards.ledger = {};
  v1::LedgerEntry e;
  e.set_chunk(4);
  e.set_end(64);
  e.set_samples(64);
  shards.ledger.push_back(e);
  absl::StatusOr<RoundResult> r = RunRound(Plan(false), &shards);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->align_version, 11);
  ASSERT_EQ(r->ledger.size(), 1u);
  EXPECT_EQ(r->ledger.at(4).end(), 64);
  ASSERT_EQ(shards.reconfigures.size(), 4u);
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(shards.reconfigures[i].second.align_version(), -1);
  for (int i = 2; i < 4; ++i)
    EXPECT_EQ(shards.reconfigures[i].second.align_version(), 11);
  EXPECT_EQ(shards.reconfigures[3].second.generation(), 3);
}

// A shard that holds no partition (more shards than partitions) reports -1
// and has no say in the version (it aligned every job to 0 before).
TEST(RoundTest, AShardWithoutPartitionsDoesNotPullTheVersionDown) {
  testing::FakeShards shards;
  shards.versions = {{"127.0.0.1:1", 26}, {"127.0.0.1:2", -1}};
  absl::StatusOr<RoundResult> r = RunRound(Plan(false), &shards);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->align_version, 26);
}

TEST(RoundTest, RestoresTheNewestCheckpointEveryShardHasThatNeverFailed) {
  testing::FakeShards shards;
  shards.disk = {{"127.0.0.1:1", {2, 4, 6}}, {"127.0.0.1:2", {2, 4}}};
  RoundPlan plan = Plan(true);
  absl::StatusOr<RoundResult> r = RunRound(plan, &shards);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->restore_step, 4) << "6 is not on every shard";
  plan.bad_checkpoints = {4};
  r = RunRound(plan, &shards);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->restore_step, 2);
  // Step 2 fails to load: the failure names it, for the next round to skip.
  shards.bad_steps = {2};
  r = RunRound(plan, &shards);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(BadCheckpoint(r.status()), 2);
  EXPECT_NE(r.status().message().find("127.0.0.1:1"), std::string::npos);
}

// A shard with nothing of the job to checkpoint (no partition, no table)
// writes no files: the restore step comes from the others' (it used to make
// every checkpoint incomplete, and a recovery restart from step 0).
TEST(RoundTest, AShardWithNothingToCheckpointHasNoSayInTheRestoreStep) {
  testing::FakeShards shards;
  shards.disk = {{"127.0.0.1:1", {2, 4, 6}}, {"127.0.0.1:2", {}}};
  shards.holds_nothing = {"127.0.0.1:2"};
  absl::StatusOr<RoundResult> r = RunRound(Plan(true), &shards);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->restore_step, 6);
  shards.holds_nothing.clear();
  r = RunRound(Plan(true), &shards);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->restore_step, 0) << "an empty shard that holds state";
}

TEST(RoundTest, AFailedCallFailsTheRoundNamingTheShard) {
  testing::FakeShards shards;
  shards.failing["127.0.0.1:2"] = absl::UnavailableError("down");
  absl::StatusOr<RoundResult> r = RunRound(Plan(false), &shards);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("127.0.0.1:2"), std::string::npos);
  EXPECT_EQ(BadCheckpoint(r.status()), -1);
}

}  // namespace
}  // namespace fulcrum
