// An update that would make a value NaN or infinite is never applied: sync
// holds the step back and names the member whose push held the largest
// element; apply-on-arrival refuses that member's push.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "common/status/payloads.h"
#include "server/ps/job_shard.h"
#include "server/ps/testing/test_jobs.h"

namespace fulcrum {
namespace {

using testing::Chunk;
using testing::Completed;
using testing::ReadAll;
using testing::TinyJob;

// 1e37 from 64 samples: finite itself, its weighted sum overflows float.
const std::vector<float> kHuge(10, 1e37f);
const std::vector<float> kOnes(10, 1.0f);

TEST(NonFiniteTest, SyncHoldsTheStepBackAndNamesTheLargestPush) {
  JobInit init = TinyJob({"a", "b"});
  std::vector<NonFiniteUpdate> seen;
  init.on_nonfinite = [&](const NonFiniteUpdate& u) { seen.push_back(u); };
  auto job = JobShard::Create(init);
  ASSERT_TRUE(job.ok()) << job.status();
  JobShard& j = **job;
  ASSERT_TRUE(Completed(j.Push(0, Chunk(0, kOnes, 1))));
  ASSERT_TRUE(Completed(j.Push(1, Chunk(0, kOnes, 1))));
  int64_t version;
  const std::vector<float> w1 = ReadAll(j, &version);
  ASSERT_EQ(version, 1);

  ASSERT_TRUE(Completed(j.Push(1, Chunk(1, kHuge, 64))));
  ASSERT_TRUE(Completed(j.Push(0, Chunk(1, kOnes, 1))));  // completes step 1
  EXPECT_EQ(ReadAll(j, &version), w1) << "nothing applied";
  EXPECT_EQ(version, 1) << "the step is held back";
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].worker_id, "b");
  EXPECT_EQ(seen[0].step, 1);
  EXPECT_EQ(seen[0].partition, 0);
  // To within a factor 2 (the validation pass keeps the largest exponent).
  EXPECT_LE(seen[0].largest, 1e37f);
  EXPECT_GT(seen[0].largest, 0.5e37f);
  EXPECT_EQ(j.LastNonFinite().count, 1);

  // b's read fails saying why; a's waits for the generation to change.
  const absl::Time soon = absl::Now() + absl::Milliseconds(50);
  absl::Status culprit = j.WaitForVersion(0, 2, 1, soon, nullptr, {1});
  EXPECT_EQ(culprit.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(culprit.message().find("non-finite"), std::string::npos)
      << culprit;
  // Marked, so that a group leader can pass the blame on (payloads.h).
  ASSERT_TRUE(culprit.GetPayload(kRefusedUpdatePayload).has_value());
  EXPECT_EQ(std::string(*culprit.GetPayload(kRefusedUpdatePayload)), "1");
  EXPECT_EQ(j.WaitForVersion(0, 2, 1, soon, nullptr, {0}).code(),
            absl::StatusCode::kDeadlineExceeded);

  // Without b (the coordinator's next generation) step 1 is redone.
  ASSERT_TRUE(j.Adopt(2, {"a"}, std::nullopt).ok());
  ASSERT_TRUE(j.Align(2, {"a"}, 1).ok());
  PushChunk redo = Chunk(1, kOnes, 1);
  redo.generation = 2;
  ASSERT_TRUE(Completed(j.Push(0, redo)));
  const std::vector<float> w2 = ReadAll(j, &version);
  EXPECT_EQ(version, 2);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w2[i], w1[i] - 0.5f) << i;
}

TEST(NonFiniteTest, MomentumStateThatWouldOverflowIsRefusedToo) {
  auto job = JobShard::Create(TinyJob({"a"}, "momentum"));
  ASSERT_TRUE(job.ok());
  const std::vector<float> w0 = ReadAll(**job);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, kHuge, 64))));
  int64_t version;
  EXPECT_EQ(ReadAll(**job, &version), w0);
  EXPECT_EQ(version, 0);
  EXPECT_EQ((*job)->LastNonFinite().worker_id, "a");
}

TEST(NonFiniteTest, ArrivalRefusesThePushAndTakesTheStepAgain) {
  for (const char* mode : {"async", "ssp"}) {
    JobInit init = TinyJob({"a", "b"});
    init.spec.mutable_consistency()->set_mode(mode);
    if (std::string(mode) == "ssp")
      init.spec.mutable_consistency()->set_staleness(2);
    int calls = 0;
    init.on_nonfinite = [&](const NonFiniteUpdate& u) {
      ++calls;
      EXPECT_EQ(u.worker_id, "b");
    };
    auto job = JobShard::Create(init);
    ASSERT_TRUE(job.ok()) << job.status();
    int64_t version;
    const std::vector<float> w0 = ReadAll(**job, &version);
    // Scaled by samples / (batch 64 x 2 members): 1e37 x 8192 overflows.
    absl::StatusOr<PushOutcome> r =
        (*job)->Push(1, Chunk(0, kHuge, int64_t{1} << 20));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << mode;
    EXPECT_NE(r.status().message().find("would make partition 0 non-finite"),
              std::string::npos)
        << r.status();
    EXPECT_TRUE(r.status().GetPayload(kRefusedUpdatePayload).has_value())
        << mode;
    EXPECT_EQ(ReadAll(**job, &version), w0) << mode;
    EXPECT_EQ(version, 0);
    EXPECT_EQ(calls, 1);
    // The refused step is not counted as pushed: a sane gradient for it
    // is taken.
    ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, kOnes, 64)))) << mode;
    EXPECT_NE(ReadAll(**job, &version), w0);
    EXPECT_EQ(version, 1);
  }
}

}  // namespace
}  // namespace fulcrum
