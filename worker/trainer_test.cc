// The Trainer and its WorkerSession without a network: real shard cores
// behind the in-process channel (server/ps/local_channel.h), the test
// playing the coordinator.
#include "worker/trainer.h"

#include <atomic>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/config/job_spec.h"
#include "common/testing/synthetic_idx.h"
#include "gtest/gtest.h"
#include "server/ps/testing/local_tier.h"
#include "worker/backend/cpu_backend.h"
#include "worker/testing/simulated_device_backend.h"

namespace fulcrum {
namespace {

v1::JobSpec Spec(int batch, int shards, int64_t steps) {
  v1::JobSpec spec;
  spec.set_name("trainer");
  spec.mutable_model()->set_type("mlp");
  for (int n : {144, 32, 4}) spec.mutable_model()->add_layers(n);
  spec.mutable_dataset()->set_dir(
      testing::SyntheticDataset("trainer_data", 600, 60, 12, 4, 3));
  spec.mutable_dataset()->set_sharding("static");
  spec.mutable_optimizer()->set_type("momentum");
  spec.mutable_optimizer()->set_lr(0.05);
  spec.mutable_optimizer()->set_momentum(0.9);
  spec.set_batch_size(batch);
  spec.set_epochs(1);
  spec.set_shards(shards);
  spec.set_seed(5);
  spec.set_max_steps(steps);
  spec.set_partition_bytes(4096);
  spec.set_chunk_bytes(1024);
  spec.set_eval_every_steps(1000);
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

std::vector<std::string> Ids(int n) {
  std::vector<std::string> ids;
  for (int w = 0; w < n; ++w) ids.push_back(absl::StrCat("w", w));
  return ids;
}

// Trains with `workers` trainers on `backends` (one each) in threads.
std::vector<absl::StatusOr<TrainResult>> Train(
    const v1::JobSpec& spec, std::vector<std::unique_ptr<Backend>>& backends) {
  const int workers = static_cast<int>(backends.size());
  testing::LocalTier tier("job", spec, Ids(workers));
  EXPECT_TRUE(tier.status().ok()) << tier.status();
  std::vector<absl::StatusOr<TrainResult>> results(
      workers, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      Trainer::Options o;
      o.worker_id = absl::StrCat("w", w);
      o.step_timeout = absl::Seconds(60);
      o.eval_batch = 60;
      Trainer trainer(backends[w].get(), tier.channels(), o);
      results[w] = trainer.Run({"job", spec, w, workers, 1, {}}, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

std::vector<std::unique_ptr<Backend>> Cpus(int n) {
  std::vector<std::unique_ptr<Backend>> b;
  for (int i = 0; i < n; ++i) b.push_back(std::make_unique<CpuBackend>());
  return b;
}

double MaxRelativeDifference(const std::vector<float>& a,
                             const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - b[i]) /
                                std::max(1e-3, std::abs(double{b[i]})));
  }
  return worst;
}

TEST(TrainerTest, TwoWorkersEqualOneWithTheirBatchTogether) {
  auto one_backend = Cpus(1);
  auto one = Train(Spec(16, 2, 15), one_backend);
  auto two_backends = Cpus(2);
  auto two = Train(Spec(8, 2, 15), two_backends);
  ASSERT_TRUE(one[0].ok()) << one[0].status();
  for (auto& r : two) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->progress.step(), 15);
    EXPECT_LE(MaxRelativeDifference(r->params, one[0]->params), 1e-4);
  }
  EXPECT_GT(two[0]->progress.test_accuracy(), 0) << "rank 0 evaluated";
}

// The device path on a simulated GPU (late copies, race checks) gives the
// host path's parameters bit for bit, taking the asynchronous paths.
TEST(TrainerTest, TheDevicePathOnASimulatedGpuEqualsTheHostPath) {
  auto host_backends = Cpus(2);
  auto host = Train(Spec(8, 3, 10), host_backends);
  std::vector<std::unique_ptr<Backend>> sims;
  for (int i = 0; i < 2; ++i)
    sims.push_back(std::make_unique<SimulatedDeviceBackend>());
  auto device = Train(Spec(8, 3, 10), sims);
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(host[w].ok()) << host[w].status();
    ASSERT_TRUE(device[w].ok()) << device[w].status();
    // Bit for bit where OpenBLAS's kernel sums a split product as it sums
    // the whole (it did on the machines this was written on); on others
    // (an AMD EPYC with AVX2) the host path's per-partition forward rounds
    // differently in the last bits. A stale or raced parameter differs by
    // far more than this bound.
    EXPECT_LE(MaxRelativeDifference(device[w]->params, host[w]->params), 1e-5);
    const auto* sim = static_cast<const SimulatedDeviceBackend*>(sims[w].get());
    EXPECT_GE(sim->async_to_device(), 10);
    EXPECT_GE(sim->async_to_host(), 10);
  }
}

TEST(TrainerTest, ChunkShardingWithoutACoordinatorIsAClearError) {
  v1::JobSpec spec = Spec(8, 1, 5);
  spec.mutable_dataset()->set_sharding("chunks");
  auto backends = Cpus(1);
  auto r = Train(spec, backends);
  EXPECT_EQ(r[0].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r[0].status().message().find("chunks"), std::string::npos);
}

// A JobLink that makes its worker leave after `leave_after` steps, or
// hands it the next generation when the old one ends.
class FakeLink : public JobLink {
 public:
  FakeLink(int64_t leave_after, std::optional<Assignment> next)
      : leave_after_(leave_after), next_(std::move(next)) {}
  void Update(const v1::Progress& p) override { step_ = p.step(); }
  bool Leaving() override { return leave_after_ >= 0 && step_ >= leave_after_; }
  std::optional<Assignment> NextAssignment(const std::string&, int64_t,
                                           absl::Time) override {
    ++asked_;
    return next_;
  }
  absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest&) override {
    return absl::UnimplementedError("static sharding");
  }
  std::atomic<int64_t> step_{0};
  std::atomic<int> asked_{0};

 private:
  const int64_t leave_after_;
  const std::optional<Assignment> next_;
};

// w1 leaves after 5 steps; the "coordinator" (this test) moves the shard to
// generation 2 with w0 alone; w0's session sees its generation end, gets
// the next one from its link, re-joins where the shard stands, and trains
// to the end without restarting.
TEST(TrainerTest, ASessionRejoinsTheNextGenerationWhenItsOwnEnds) {
  const v1::JobSpec spec = Spec(8, 1, 20);
  testing::LocalTier tier("job", spec, Ids(2));
  ASSERT_TRUE(tier.status().ok()) << tier.status();
  FakeLink stays(-1, Assignment{"job", spec, 0, 1, 2, {}});
  FakeLink leaves(5, std::nullopt);
  auto backends = Cpus(2);
  absl::StatusOr<TrainResult> r0 = absl::UnknownError("not run"), r1 = r0;
  auto run = [&](int w, JobLink* link, absl::StatusOr<TrainResult>* out) {
    Trainer::Options o;
    o.worker_id = absl::StrCat("w", w);
    o.step_timeout = absl::Seconds(60);
    o.rejoin_timeout = absl::Seconds(10);
    Trainer trainer(backends[w].get(), tier.channels(), o);
    *out = trainer.Run({"job", spec, w, 2, 1, {}}, link);
  };
  std::thread t0(run, 0, &stays, &r0);
  std::thread t1(run, 1, &leaves, &r1);
  t1.join();
  EXPECT_EQ(r1.status().code(), absl::StatusCode::kCancelled) << r1.status();
  absl::StatusOr<int64_t> aligned = tier.Reconfigure(2, {"w0"});
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  t0.join();
  ASSERT_TRUE(r0.ok()) << r0.status();
  EXPECT_EQ(r0->progress.step(), 20);
  EXPECT_EQ(stays.asked_.load(), 1);
  EXPECT_GE(*aligned, 5);
}

}  // namespace
}  // namespace fulcrum
