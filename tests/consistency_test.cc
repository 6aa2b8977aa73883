// The consistency modes' guarantees, on real shards and trainers:
// - ssp with staleness 0 gives the same parameters as sync;
// - ssp(s) never serves a read staler than s clocks, and does reach s when
//   workers are uneven (so the bound is exercised, not vacuous);
// - async under the same delays goes past any such bound.
#include <algorithm>
#include <cmath>

#include "common/config/job_spec.h"
#include "common/testing/synthetic_idx.h"
#include "gtest/gtest.h"
#include "tests/in_process_cluster.h"

namespace fulcrum {
namespace {

std::string DataDir() {
  return testing::SyntheticDataset("consistency_data", 2000, 400, 12, 4, 5);
}

v1::JobSpec Spec(const std::string& mode, int staleness, int steps) {
  v1::JobSpec spec;
  spec.set_name("consistency");
  spec.mutable_model()->set_type("mlp");
  for (int n : {144, 32, 4}) spec.mutable_model()->add_layers(n);
  spec.mutable_dataset()->set_dir(DataDir());
  spec.mutable_optimizer()->set_type("momentum");
  spec.mutable_optimizer()->set_lr(0.05);
  spec.mutable_optimizer()->set_momentum(0.9);
  spec.mutable_consistency()->set_mode(mode);
  spec.mutable_consistency()->set_staleness(staleness);
  spec.set_batch_size(8);
  spec.set_shards(2);
  spec.set_seed(7);
  spec.set_max_steps(steps);
  spec.set_partition_bytes(4096);
  spec.set_eval_every_steps(100000);
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

StalenessStats Merge(const std::vector<StalenessStats>& per_shard) {
  StalenessStats all;
  for (const StalenessStats& s : per_shard) {
    all.reads += s.reads;
    all.sum += s.sum;
    all.max = std::max(all.max, s.max);
  }
  return all;
}

// Uneven workers: worker 0 is a straggler (+3 ms a step), all jitter 0-2 ms.
void Stragglers(int rank, Trainer::Options* o) {
  o->step_delay = absl::Milliseconds(rank == 0 ? 3 : 0);
  o->step_delay_jitter = absl::Milliseconds(2);
  o->delay_seed = 100 + rank;
}

TEST(ConsistencyTest, SspWithZeroStalenessEqualsSync) {
  testing::TrainRun sync = testing::TrainInProcess(Spec("sync", 0, 20), 2);
  testing::TrainRun ssp0 =
      testing::TrainInProcess(Spec("ssp", 0, 20), 2, Stragglers);
  for (int w = 0; w < 2; ++w) {
    ASSERT_EQ(sync.errors[w], "");
    ASSERT_EQ(ssp0.errors[w], "");
  }
  ASSERT_FALSE(sync.results[0].params.empty());
  EXPECT_EQ(ssp0.results[0].params, sync.results[0].params);
  EXPECT_EQ(ssp0.results[1].params, sync.results[0].params);
  EXPECT_EQ(Merge(ssp0.staleness).max, 0);
  // The same through shared memory (where a read's partitions travel in
  // one message, StreamResponse.more).
  testing::TrainRun shm = testing::TrainInProcess(
      Spec("ssp", 0, 20), 2, Stragglers, nullptr, testing::Transport::kShm);
  for (int w = 0; w < 2; ++w) {
    ASSERT_EQ(shm.errors[w], "");
    EXPECT_EQ(shm.results[w].params, sync.results[0].params);
  }
  EXPECT_GE(shm.shm_mapped, 2);
  EXPECT_EQ(shm.shm_refused, 0);
}

class SspBoundTest : public ::testing::TestWithParam<int> {};

TEST_P(SspBoundTest, ReadsAreNeverStalerThanTheBoundAndReachIt) {
  const int s = GetParam();
  testing::TrainRun run =
      testing::TrainInProcess(Spec("ssp", s, 60), 4, Stragglers);
  for (int w = 0; w < 4; ++w) {
    ASSERT_EQ(run.errors[w], "") << "worker " << w;
    EXPECT_EQ(run.results[w].progress.step(), 60);
  }
  const StalenessStats all = Merge(run.staleness);
  EXPECT_GT(all.reads, 4 * 60);  // every read of every worker on both shards
  EXPECT_LE(all.max, s) << "a read was staler than the bound";
  EXPECT_EQ(all.max, s) << "the straggler never pushed anyone to the bound";
  RecordProperty("mean_staleness", std::to_string(double(all.sum) / all.reads));
  // It still learns: rank 0 evaluates at the end (4 classes, chance 0.25).
  EXPECT_GE(run.results[0].progress.test_accuracy(), 0.6);
}

INSTANTIATE_TEST_SUITE_P(Staleness, SspBoundTest, ::testing::Values(1, 3));

TEST(ConsistencyTest, AsyncIsUnboundedUnderTheSameDelays) {
  testing::TrainRun run =
      testing::TrainInProcess(Spec("async", 0, 60), 4, Stragglers);
  for (int w = 0; w < 4; ++w) ASSERT_EQ(run.errors[w], "") << "worker " << w;
  const StalenessStats all = Merge(run.staleness);
  EXPECT_GT(all.max, 3) << "async should run past the largest ssp bound tested";
  RecordProperty("max_staleness", std::to_string(all.max));
  EXPECT_GE(run.results[0].progress.test_accuracy(), 0.6);
}

}  // namespace
}  // namespace fulcrum
