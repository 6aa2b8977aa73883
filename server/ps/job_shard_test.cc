// JobShard: aggregation, idempotency, reads, the stall inspector, and
// ParameterShard.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/config/job_spec.h"
#include "gtest/gtest.h"
#include "common/testing/fault_injection_env.h"
#include "server/ps/checkpoint.h"
#include "server/ps/parameter_shard.h"
#include "server/ps/testing/test_jobs.h"

namespace fulcrum {
namespace {

using testing::Chunk;
using testing::Completed;
using testing::MultiPartitionJob;
using testing::PartChunk;
using testing::ReadAll;
using testing::ReadPartition;
using testing::TestDir;
using testing::TinyJob;
TEST(ShardCoreTest, WeightedAverageOfUnevenPushes) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ((*job)->partition_ids().size(), 1u);
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> ga(10, 1.0f), gb(10, 4.0f);
  // Worker a: 3 samples with mean gradient 1; worker b: 1 sample with 4.
  auto r = (*job)->Push(0, Chunk(0, ga, 3));
  ASSERT_TRUE(r.ok() && *r == PushOutcome::kCompleted);
  int64_t version;
  EXPECT_EQ(ReadAll(**job, &version), w0);  // not applied before b pushes
  EXPECT_EQ(version, 0);
  r = (*job)->Push(1, Chunk(0, gb, 1));
  ASSERT_TRUE(r.ok() && *r == PushOutcome::kCompleted);
  std::vector<float> w1 = ReadAll(**job, &version);
  EXPECT_EQ(version, 1);
  // mean = (3*1 + 1*4) / 4 = 1.75; w1 = w0 - 0.5 * 1.75
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.875f) << i;
}

TEST(ShardCoreTest, EmptyPushWithZeroSamplesDoesNotBlockOrWeigh) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> ga(10, 2.0f);
  ASSERT_TRUE((*job)->Push(0, Chunk(0, ga, 5)).ok());
  PushChunk empty;
  empty.step = 0;
  ASSERT_TRUE((*job)->Push(1, empty).ok());
  int64_t version;
  std::vector<float> w1 = ReadAll(**job, &version);
  EXPECT_EQ(version, 1);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 1.0f);
}

TEST(ShardCoreTest, RepeatedPushIsNotAppliedTwice) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  auto again = (*job)->Push(0, Chunk(0, g, 1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, PushOutcome::kAlreadyComplete);
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  // A retry of step 0 after it was applied is acknowledged and ignored.
  auto late = (*job)->Push(1, Chunk(0, g, 1));
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(*late, PushOutcome::kAlreadyComplete);
  std::vector<float> w1 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f);
}

TEST(ShardCoreTest, AStepCarryingAStopAppliesNothing) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  int64_t version;
  const std::vector<float> w1 = ReadAll(**job, &version);
  PushChunk stop = Chunk(1, g, 1);
  stop.stop = true;
  ASSERT_TRUE(Completed((*job)->Push(0, stop)));
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(1, g, 1))));
  // Version 2 is final and equals version 1: what rank 0 evaluated.
  std::vector<float> w2(10);
  bool stopped = false;
  ASSERT_TRUE((*job)->Read(0, 0, 10, w2.data(), &version, &stopped).ok());
  EXPECT_EQ(version, 2);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(w2, w1);
}

TEST(ShardCoreTest, MomentumAcrossSteps) {
  auto job = JobShard::Create(TinyJob({"a"}, "momentum"));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 2))));
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(1, g, 2))));
  // v1 = 1, w1 = w0 - 0.5; v2 = 0.9 + 1 = 1.9, w2 = w1 - 0.95
  std::vector<float> w2 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(w2[i], w0[i] - 1.45f, 1e-6);
}

TEST(ShardCoreTest, RejectsBadPushesWithoutChangingState) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> w0 = ReadAll(**job);
  std::vector<float> g(10, 1.0f);
  PushChunk c = Chunk(0, g, 1);
  c.partition = 7;
  auto r = (*job)->Push(0, c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("push.partition 7"), std::string::npos);

  c = Chunk(0, g, 1);
  c.data = Payload(g.data(), 36);
  r = (*job)->Push(0, c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("push.data has 36 bytes, expected 40"),
            std::string::npos);

  std::vector<float> bad = g;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  r = (*job)->Push(0, Chunk(0, bad, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("element 3"), std::string::npos);
  bad[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ((*job)->Push(0, Chunk(0, bad, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);

  r = (*job)->Push(0, Chunk(3, g, 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  r = (*job)->Push(0, Chunk(0, g, -1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // 2^62 samples from each of two workers wrapped the step's sum to 0 and
  // silently dropped the update: refused.
  r = (*job)->Push(0, Chunk(0, g, int64_t{1} << 62));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("push.samples must be in [0, 4294967296]"),
            std::string::npos)
      << r.status();

  // Nothing was accumulated: after both valid pushes the update is exactly one
  // step.
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  std::vector<float> w1 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f);
}

// Sparse pushes (wire.topk): only the listed elements of the chunk, the
// others 0, weighed by samples like a dense push - in the sync barrier and
// applied on arrival (async).
std::string IndexBytes(const std::vector<uint32_t>& idx) {
  return std::string(reinterpret_cast<const char*>(idx.data()), idx.size() * 4);
}

TEST(ShardCoreTest, SparsePushesAddOnlyTheirElements) {
  for (const std::string mode : {"sync", "async"}) {
    SCOPED_TRACE(mode);
    JobInit init = TinyJob({"a", "b"});
    init.spec.mutable_consistency()->set_mode(mode);
    init.spec.set_batch_size(2);
    auto job = JobShard::Create(init);
    ASSERT_TRUE(job.ok()) << job.status();
    const std::vector<float> w0 = ReadAll(**job);
    // a: 3 samples, elements 1 and 7 only; b: 1 sample, dense.
    const std::vector<float> values = {2.0f, -4.0f};
    const std::string idx = IndexBytes({1, 7});
    PushChunk c = Chunk(0, values, 3);
    c.indices = idx;
    ASSERT_TRUE((*job)->Push(0, c).ok());
    std::vector<float> gb(10, 1.0f);
    ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, gb, 1))));
    const std::vector<float> w1 = ReadAll(**job);
    for (int i = 0; i < 10; ++i) {
      const float ga = i == 1 ? 2.0f : i == 7 ? -4.0f : 0.0f;
      // sync: lr 0.5 x (3 ga + 1) / 4; async: each on arrival, scaled by
      // samples / (batch 2 x 2 members), lr 0.5.
      const float want = mode == "sync"
                             ? w0[i] - 0.5f * (3 * ga + 1) / 4
                             : w0[i] - 0.5f * (3 * ga / 4) - 0.5f * (1.0f / 4);
      EXPECT_FLOAT_EQ(w1[i], want) << i;
    }
  }
}

// wire.topk with optimizer momentum: the workers apply the momentum
// (MomentumOnWorkers), so the shard steps plain SGD; without top-k, or
// with momentum_correction false, the shard keeps the momentum.
TEST(ShardCoreTest, MomentumRunsOnTheWorkersWithTopK) {
  for (const bool corrected : {true, false}) {
    SCOPED_TRACE(corrected ? "corrected" : "not corrected");
    JobInit init = TinyJob({"a"}, "momentum");  // lr 0.5, momentum 0.9
    init.spec.mutable_wire()->set_topk(0.5);
    init.spec.mutable_wire()->set_momentum_correction(corrected);
    auto job = JobShard::Create(init);
    ASSERT_TRUE(job.ok()) << job.status();
    const std::vector<float> w0 = ReadAll(**job);
    const std::vector<float> g(10, 1.0f);
    ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
    ASSERT_TRUE(Completed((*job)->Push(0, Chunk(1, g, 1))));
    const std::vector<float> w2 = ReadAll(**job);
    // SGD: two steps of 0.5; momentum: 0.5 then 0.5 x 1.9.
    const float moved = corrected ? 1.0f : 1.45f;
    for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w2[i], w0[i] - moved) << i;
  }
}

TEST(ShardCoreTest, RejectsBadSparsePushesWithoutChangingState) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  const std::vector<float> w0 = ReadAll(**job);
  const std::vector<float> two = {1.0f, 1.0f};
  struct Case {
    std::string indices;
    std::vector<float> values;
    int64_t samples;
    std::string message;
  };
  const std::vector<Case> cases = {
      {IndexBytes({3, 3}), two, 1, "push.indices[1] = 3 must be above the one before (3)"},
      {IndexBytes({5, 2}), two, 1, "push.indices[1] = 2 must be above"},
      {IndexBytes({1, 10}), two, 1, "below the chunk's 10 elements"},
      {IndexBytes({1, 2}).substr(0, 7), two, 1, "push.indices has 7 bytes"},
      {IndexBytes({1, 2, 3}), two, 1, "push.data has 8 bytes, expected 12 for the 3 push.indices"},
      {IndexBytes(std::vector<uint32_t>(11, 0)), std::vector<float>(11, 0.0f), 1,
       "at most 10 elements"},
      {IndexBytes({1}), {}, 0, "push.data and push.indices must be empty"},
  };
  for (const Case& k : cases) {
    PushChunk c = Chunk(0, k.values, k.samples);
    c.indices = k.indices;
    const absl::Status s = (*job)->Push(0, c).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.message;
    EXPECT_NE(s.message().find(k.message), std::string::npos) << s;
  }
  std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  PushChunk c = Chunk(0, nan, 1);
  const std::string idx = IndexBytes({0, 4});
  c.indices = idx;
  EXPECT_EQ((*job)->Push(0, c).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing was accumulated: one valid step moves exactly one step.
  const std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  const std::vector<float> w1 = ReadAll(**job);
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 0.5f);
}

TEST(ShardCoreTest, StallInspectorNamesTheMissingWorkers) {
  testing::FaultInjectionEnv env;  // its clock moves only when told
  JobInit init = TinyJob({"a", "b", "c"});
  init.env = &env;
  auto job = JobShard::Create(init);
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE((*job)->Stalls(absl::ZeroDuration()).empty())
      << "nothing pushed yet";
  std::vector<float> g(10, 1.0f);
  ASSERT_TRUE(Completed((*job)->Push(1, Chunk(0, g, 1))));
  EXPECT_TRUE((*job)->Stalls(absl::Seconds(60)).empty())
      << "below the threshold";
  env.Advance(absl::Seconds(59));
  EXPECT_TRUE((*job)->Stalls(absl::Seconds(60)).empty()) << "59 s < 60 s";
  env.Advance(absl::Seconds(2));
  auto stalls = (*job)->Stalls(absl::Seconds(60));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].partition, 0);
  EXPECT_EQ(stalls[0].step, 0);
  EXPECT_DOUBLE_EQ(stalls[0].waited_seconds, 61);
  EXPECT_EQ(stalls[0].waiting_for, (std::vector<std::string>{"a", "c"}));
  ASSERT_TRUE(Completed((*job)->Push(0, Chunk(0, g, 1))));
  ASSERT_TRUE(Completed((*job)->Push(2, Chunk(0, g, 1))));
  EXPECT_TRUE((*job)->Stalls(absl::ZeroDuration()).empty())
      << "the step completed";
}

TEST(ShardCoreTest, WaitForVersionWakesOnUpdateAndEnd) {
  auto job = JobShard::Create(TinyJob({"a"}));
  ASSERT_TRUE(job.ok());
  std::vector<float> g(10, 1.0f);
  std::thread pusher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE((*job)->Push(0, Chunk(0, g, 1)).ok());
  });
  EXPECT_TRUE(
      (*job)
          ->WaitForVersion(0, 1, 1, absl::Now() + absl::Seconds(10), nullptr)
          .ok());
  pusher.join();
  EXPECT_EQ(
      (*job)
          ->WaitForVersion(0, 5, 1, absl::Now() + absl::Milliseconds(20), nullptr)
          .code(),
      absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*job)
                ->WaitForVersion(0, 5, 1, absl::Now() + absl::Seconds(10),
                                 [] { return true; })
                .code(),
            absl::StatusCode::kCancelled);
  std::thread ender([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*job)->End();
  });
  EXPECT_EQ((*job)
                ->WaitForVersion(0, 5, 1, absl::Now() + absl::Seconds(10), nullptr)
                .code(),
            absl::StatusCode::kAborted);
  ender.join();
}

TEST(ShardCoreTest, OnVersionDecidesOnThePushingThreadOrAtOnce) {
  auto job = JobShard::Create(TinyJob({"a", "b"}));
  ASSERT_TRUE(job.ok());
  JobShard& j = **job;
  std::vector<float> g(10, 1.0f);
  uint64_t id = 0;
  std::optional<absl::Status> got;
  std::thread::id ran_on;
  int64_t version_seen = -1;
  auto done = [&](absl::Status s) {
    got = s;
    ran_on = std::this_thread::get_id();
    // The partition's lock is free: the callback may read it.
    ReadAll(j, &version_seen);
  };
  // Not ready: registered, nothing run.
  EXPECT_FALSE(j.OnVersion(0, 1, 1, {0}, done, &id).has_value());
  ASSERT_TRUE(j.Push(0, Chunk(0, g, 1)).ok());
  EXPECT_FALSE(got.has_value());  // b has not pushed
  std::thread pusher([&] { ASSERT_TRUE(j.Push(1, Chunk(0, g, 1)).ok()); });
  const std::thread::id pusher_id = pusher.get_id();
  pusher.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->ok()) << *got;
  EXPECT_EQ(ran_on, pusher_id);  // the completing push ran it, no hop
  EXPECT_EQ(version_seen, 1);
  EXPECT_FALSE(j.CancelVersionWait(0, id));  // decided already
  // Ready now: the outcome comes back and the callback never runs.
  got.reset();
  std::optional<absl::Status> now = j.OnVersion(0, 1, 1, {0}, done, &id);
  ASSERT_TRUE(now.has_value());
  EXPECT_TRUE(now->ok());
  EXPECT_EQ(j.OnVersion(0, 1, 7, {0}, done, &id)->code(),
            absl::StatusCode::kAborted);  // another generation
  EXPECT_EQ(j.OnVersion(3, 1, 1, {0}, done, &id)->code(),
            absl::StatusCode::kInvalidArgument);
  // A cancelled wait never runs; a pending one ends with the job.
  uint64_t cancelled = 0;
  EXPECT_FALSE(j.OnVersion(0, 5, 1, {0}, done, &cancelled).has_value());
  EXPECT_TRUE(j.CancelVersionWait(0, cancelled));
  EXPECT_FALSE(j.OnVersion(0, 5, 1, {0}, done, &id).has_value());
  j.End();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->code(), absl::StatusCode::kAborted) << *got;
}

TEST(ParameterShardTest, InitIsIdempotentAndChecksSpec) {
  ParameterShard shard;
  JobInit init = TinyJob({"a"});
  auto first = shard.InitJob(init);
  ASSERT_TRUE(first.ok());
  auto again = shard.InitJob(init);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first->get(), again->get());
  init.spec.mutable_optimizer()->set_lr(0.1);
  EXPECT_EQ(shard.InitJob(init).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard.Find("nope").status().code(), absl::StatusCode::kNotFound);
  JobInit bad = TinyJob({"a"});
  bad.job_id = "job-2";
  bad.spec.mutable_optimizer()->set_lr(-1);
  EXPECT_EQ(shard.InitJob(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  shard.EndJob("job-1");
  EXPECT_TRUE((*first)->ended());
  shard.ForgetJob("job-1");
  EXPECT_EQ(shard.Find("job-1").status().code(), absl::StatusCode::kNotFound);
}

// A job ended here (the shard's coordinator stopped listing it for a while)
// and placed here again is a new incarnation: InitJob replaces the ended
// one instead of handing it back (every round then failed "job has ended"
// and the job was wedged).
TEST(ParameterShardTest, InitAfterEndMakesTheJobAnew) {
  ParameterShard shard;
  JobInit init = TinyJob({"a"});
  auto first = shard.InitJob(init);
  ASSERT_TRUE(first.ok());
  shard.EndJob(init.job_id);
  init.generation = 2;
  auto again = shard.InitJob(init);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(first->get(), again->get());
  EXPECT_FALSE((*again)->ended());
  EXPECT_TRUE((*first)->ended());
  EXPECT_EQ(shard.Find(init.job_id)->get(), again->get());
}

TEST(ParameterShardTest, KeepsOnlyTheLastEndedJobs) {
  ParameterShard shard;
  const int jobs = ParameterShard::kKeepEnded + 2;
  for (int i = 0; i < jobs; ++i) {
    JobInit init = TinyJob({"a"});
    init.job_id = "job-" + std::to_string(i);
    ASSERT_TRUE(shard.InitJob(init).ok());
    shard.EndJob(init.job_id);
    shard.EndJob(init.job_id);  // idempotent: counted once
  }
  EXPECT_EQ(shard.JobIds().size(), ParameterShard::kKeepEnded);
  EXPECT_EQ(shard.Find("job-0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(shard.Find("job-1").status().code(), absl::StatusCode::kNotFound);
  auto last = shard.Find("job-" + std::to_string(jobs - 1));
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE((*last)->ended());
}

}  // namespace
}  // namespace fulcrum

namespace fulcrum {
namespace {

// An external model's shard holds no values until a member uploads them:
// hellos wait (UNAVAILABLE), a bad chunk names the field, the upload is
// taken whole, and then never replaced.
TEST(ExternalModelShardTest, ValuesComeFromAMemberOnceAndAreNeverReplaced) {
  JobInit init = testing::TinyJob({"a", "b"});
  init.spec.mutable_model()->clear_layers();
  init.spec.mutable_model()->set_type("external");
  v1::TensorSpec* w = init.spec.mutable_model()->add_tensors();
  w->set_name("w");
  w->add_shape(300);  // 1200 bytes: two chunks of 1 KiB
  ParameterShard shard;
  auto job = shard.InitJob(init);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE((*job)->initialized());
  std::vector<float> values(300);
  for (int i = 0; i < 300; ++i) values[i] = 0.01f * i;
  auto bytes = [&](int64_t from, int64_t n) {
    return reinterpret_cast<const char*>(values.data() + from);
  };
  EXPECT_EQ((*job)->Initialize("x", 1, 0, 0, bytes(0, 256), 1024).code(),
            absl::StatusCode::kPermissionDenied);
  absl::Status bad = (*job)->Initialize("a", 1, 0, 3, bytes(0, 256), 1024);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("initialize.offset 3"), std::string::npos)
      << bad;
  ASSERT_TRUE((*job)->Initialize("a", 1, 0, 0, bytes(0, 256), 1024).ok());
  EXPECT_FALSE((*job)->initialized()) << "one chunk of two";
  ASSERT_TRUE((*job)->Initialize("a", 1, 0, 256, bytes(256, 44), 176).ok());
  EXPECT_TRUE((*job)->initialized());
  EXPECT_EQ(testing::ReadAll(**job), values);
  std::vector<float> other(256, 7.0f);
  EXPECT_EQ((*job)
                ->Initialize("b", 1, 0, 0,
                             reinterpret_cast<const char*>(other.data()), 1024)
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(testing::ReadAll(**job), values) << "never replaced";
}

// Buffers (running statistics) take the pushes' sample-weighted average in
// sync mode and the latest member's values on arrival; the parameters beside
// them take the optimizer step as ever.
JobInit BufferJob(const std::string& mode) {
  JobInit init = testing::TinyJob({"a", "b"}, "momentum");
  init.spec.mutable_model()->clear_layers();
  init.spec.mutable_model()->set_type("external");
  v1::TensorSpec* w = init.spec.mutable_model()->add_tensors();
  w->set_name("w");
  w->add_shape(6);
  v1::TensorSpec* rm = init.spec.mutable_model()->add_tensors();
  rm->set_name("bn.running_mean");
  rm->add_shape(4);
  rm->set_buffer(true);
  init.spec.mutable_consistency()->set_mode(mode);
  return init;
}

std::unique_ptr<JobShard> Initialized(const JobInit& init,
                                      const std::vector<float>& values) {
  auto job = JobShard::Create(init);
  EXPECT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE((*job)
                  ->Initialize("a", init.generation, 0, 0,
                               reinterpret_cast<const char*>(values.data()),
                               values.size() * 4)
                  .ok());
  return std::move(*job);
}

TEST(BufferShardTest, SyncKeepsTheWeightedAverageOfThePushedValues) {
  const std::vector<float> w0 = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  std::unique_ptr<JobShard> job = Initialized(BufferJob("sync"), w0);
  // a: 3 samples, gradient 1, running_mean 2; b: 1 sample, 5 and 6.
  const std::vector<float> ga = {1, 1, 1, 1, 1, 1, 2, 2, 2, 2};
  const std::vector<float> gb = {5, 5, 5, 5, 5, 5, 6, 6, 6, 6};
  ASSERT_TRUE(job->Push(0, Chunk(0, ga, 3)).ok());
  ASSERT_TRUE(Completed(job->Push(1, Chunk(0, gb, 1))));
  std::vector<float> w1 = ReadAll(*job);
  // Parameters: momentum (first step v = g) w -= 0.5 * (3*1 + 5)/4 = 1.
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(w1[i], 0.0f) << i;
  // Buffer: (3*2 + 1*6)/4 = 3, no optimizer step.
  for (int i = 6; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], 3.0f) << i;
  // Second step: the momentum state of buffer elements plays no part.
  ASSERT_TRUE(job->Push(0, Chunk(1, ga, 1)).ok());
  ASSERT_TRUE(Completed(job->Push(1, Chunk(1, ga, 1))));
  std::vector<float> w2 = ReadAll(*job);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(w2[i], -0.5f * (0.9f * 2 + 1));
  for (int i = 6; i < 10; ++i) EXPECT_FLOAT_EQ(w2[i], 2.0f) << i;
}

TEST(BufferShardTest, AsyncKeepsTheLatestMembersValues) {
  const std::vector<float> w0 = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  std::unique_ptr<JobShard> job = Initialized(BufferJob("async"), w0);
  const std::vector<float> gb = {2, 2, 2, 2, 2, 2, 6, 6, 6, 6};
  ASSERT_TRUE(Completed(job->Push(1, Chunk(0, gb, 64))));
  std::vector<float> w1 = ReadAll(*job);
  // Scaled by samples / (batch * members) = 64 / (64 * 2): w -= 0.5 * 1.
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(w1[i], 0.5f) << i;
  for (int i = 6; i < 10; ++i) EXPECT_FLOAT_EQ(w1[i], 6.0f) << i;
}

}  // namespace
}  // namespace fulcrum
