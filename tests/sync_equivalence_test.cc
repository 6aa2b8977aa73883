// The core correctness property of synchronous training: with the same seed
// and data order, W workers with batch b produce the same parameters as one
// worker with batch W*b (to float tolerance), whatever the number of shards.
// Real shards (gRPC services on loopback ports) and real trainers, in one
// process.
#include <iostream>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/job_spec.h"
#include "common/tensor/layout.h"
#include "common/testing/synthetic_idx.h"
#include "gtest/gtest.h"
#include "tests/in_process_cluster.h"
#include "worker/testing/simulated_device_backend.h"

namespace fulcrum {
namespace {

std::string DataDir() {
  return testing::SyntheticDataset("equivalence_data", 1000, 100, 12, 4, 9);
}

v1::JobSpec Spec(int batch, int shards,
                 v1::Encoding gradients = v1::ENCODING_FP32,
                 v1::Encoding parameters = v1::ENCODING_FP32,
                 double topk = 0, bool random = false) {
  v1::JobSpec spec;
  spec.mutable_wire()->set_gradients(gradients);
  spec.mutable_wire()->set_parameters(parameters);
  if (random) {
    spec.mutable_wire()->set_randomk(topk);
  } else {
    spec.mutable_wire()->set_topk(topk);
  }
  // The top-k tests compare with the shard's momentum (bit for bit at
  // topk 1); momentum correction is job_shard_test's and the bench's.
  spec.mutable_wire()->set_momentum_correction(false);
  // Every chunk sparse (these chunks are 1 KiB, below the 16 KiB default).
  spec.mutable_wire()->set_sparse_min_bytes(0);
  spec.set_name("equivalence");
  spec.mutable_model()->set_type("mlp");
  for (int n : {144, 32, 16, 4}) spec.mutable_model()->add_layers(n);
  spec.mutable_dataset()->set_dir(DataDir());
  spec.mutable_optimizer()->set_type("momentum");
  spec.mutable_optimizer()->set_lr(0.05);
  spec.mutable_optimizer()->set_momentum(0.9);
  spec.set_batch_size(batch);
  spec.set_epochs(1);
  spec.set_shards(shards);
  spec.set_seed(42);
  spec.set_max_steps(20);
  spec.set_partition_bytes(4096);  // several partitions per shard
  spec.set_chunk_bytes(1024);      // several chunks per partition
  spec.set_eval_every_steps(1000);
  ApplyDefaults(&spec);
  return spec;
}

using testing::Transport;

// Every worker's final parameters after 20 steps.
std::vector<std::vector<float>> Train(
    int workers, int batch, int shards, Transport transport,
    v1::Encoding gradients = v1::ENCODING_FP32,
    v1::Encoding parameters = v1::ENCODING_FP32, double topk = 0,
    bool random = false) {
  const v1::JobSpec spec =
      Spec(batch, shards, gradients, parameters, topk, random);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  testing::TrainRun run =
      testing::TrainInProcess(spec, workers, nullptr, nullptr, transport);
  std::vector<std::vector<float>> params;
  for (int w = 0; w < workers; ++w) {
    EXPECT_EQ(run.errors[w], "") << "worker " << w;
    EXPECT_EQ(run.results[w].progress.step(), 20);
    params.push_back(std::move(run.results[w].params));
  }
  for (const StalenessStats& s : run.staleness)
    EXPECT_EQ(s.max, 0) << "sync reads are fresh";
  // The transport is the one asked for: with kShm every stream's payloads
  // went through its segment (none fell back to TCP).
  if (testing::SharedMemory(transport)) {
    EXPECT_GE(run.shm_mapped, workers);
    EXPECT_EQ(run.shm_refused, 0);
  } else {
    EXPECT_EQ(run.shm_mapped + run.shm_refused, 0);
  }
  return params;
}

// max_i |a_i - b_i| / max(|b_i|, 1e-3): elementwise relative difference,
// with a floor so parameters that are ~0 do not divide by ~0.
double MaxRelativeDifference(const std::vector<float>& a,
                             const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - b[i]) /
                                std::max(1e-3, std::abs(double{b[i]})));
  }
  return worst;
}

// ||a - b|| / ||b|| over the whole model: single elements near zero drift
// further on a trajectory that differs by rounding.
double RelativeNormDifference(const std::vector<float>& a,
                              const std::vector<float>& b) {
  double d2 = 0, n2 = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d2 += std::pow(double{a[i]} - b[i], 2);
    n2 += std::pow(double{b[i]}, 2);
  }
  return std::sqrt(d2 / n2);
}

// On every transport of the data plane: gRPC on loopback with payloads in
// the messages or in shared memory, the in-process channel into the shard
// cores, and both gRPC ways to shards serving Stream on the callback API.
class SyncEquivalenceTest
    : public ::testing::TestWithParam<std::tuple<int, int, Transport>> {};

TEST_P(SyncEquivalenceTest, WorkersTimesBatchEqualsOneBigBatch) {
  const auto [workers, shards, transport] = GetParam();
  const int b = 8;
  const std::vector<std::vector<float>> one =
      Train(1, workers * b, shards, transport);
  const std::vector<std::vector<float>> many =
      Train(workers, b, shards, transport);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_FALSE(one[0].empty());
  // Training moved the parameters (so equality is not trivial) ...
  auto layout = ParameterLayout::ForMlp({144, 32, 16, 4}, shards, 4096);
  std::vector<float> init(layout->total_size());
  InitializeParameters(*layout, 42, 0, layout->total_size(), init.data());
  EXPECT_GT(MaxRelativeDifference(one[0], init), 1e-2);
  // ... and every worker of the many ends where the single worker ends.
  for (int w = 0; w < workers; ++w) {
    ASSERT_EQ(many[w].size(), one[0].size());
    EXPECT_EQ(many[w], many[0]) << "workers disagree";
    const double diff = MaxRelativeDifference(many[w], one[0]);
    EXPECT_LE(diff, 1e-4) << workers << " workers, " << shards << " shards";
    RecordProperty("max_relative_difference", std::to_string(diff));
  }
}

INSTANTIATE_TEST_SUITE_P(
    WorkersShardsTransports, SyncEquivalenceTest,
    ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values(1, 2, 3),
                       ::testing::Values(Transport::kGrpc, Transport::kShm,
                                         Transport::kLocal,
                                         Transport::kCallback,
                                         Transport::kShmCallback)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), "workers_",
                          std::get<1>(info.param), "shards_",
                          testing::TransportName(std::get<2>(info.param)));
    });

// wire.pre_reduce: the workers (one host here) hand their gradients to
// rank 0, which pushes their weighted mean for all - on every transport the
// result is still one big batch's (1e-4), and the shards' streams carry
// only the leader's pushes.
class PreReduceTest : public ::testing::TestWithParam<std::tuple<int, Transport>> {};

TEST_P(PreReduceTest, AHostGroupTrainsAsOneBigBatch) {
  const auto [workers, transport] = GetParam();
  const int b = 8, shards = 2;
  const std::vector<std::vector<float>> one = Train(1, workers * b, shards, transport);
  v1::JobSpec spec = Spec(b, shards, v1::ENCODING_FP32, v1::ENCODING_FP32, 0);
  spec.mutable_wire()->set_pre_reduce(true);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  testing::TrainRun run =
      testing::TrainInProcess(spec, workers, nullptr, nullptr, transport);
  for (int w = 0; w < workers; ++w) {
    ASSERT_EQ(run.errors[w], "") << "worker " << w;
    EXPECT_EQ(run.results[w].progress.step(), 20);
    ASSERT_EQ(run.results[w].params.size(), one[0].size());
    EXPECT_EQ(run.results[w].params, run.results[0].params) << "worker " << w;
    EXPECT_LE(MaxRelativeDifference(run.results[w].params, one[0]), 1e-4);
  }
  // One stream per shard, the leader's, pushing for the others (the
  // in-process transport has no metrics: the shard core's own test counts).
  if (transport != Transport::kLocal) {
    EXPECT_EQ(run.group_members, (workers - 1) * shards);
  }
  if (testing::SharedMemory(transport)) {
    EXPECT_EQ(run.shm_mapped, shards);
  }
}

INSTANTIATE_TEST_SUITE_P(
    WorkersTransports, PreReduceTest,
    ::testing::Combine(::testing::Values(2, 4),
                       ::testing::Values(Transport::kGrpc, Transport::kShm,
                                         Transport::kLocal,
                                         Transport::kCallback,
                                         Transport::kShmCallback)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), "workers_",
                          testing::TransportName(std::get<1>(info.param)));
    });

// A host group with bf16 gradients: the leader sums the group's fp32
// gradients and its channel narrows the sum once - both transports round it
// alike, the workers agree, and 20 steps stay close to fp32's big batch.
TEST(PreReduceWireTest, ABf16GroupRoundsItsSumAlikeOnBothTransports) {
  const std::vector<std::vector<float>> fp32 =
      Train(1, 2 * 8, 2, Transport::kLocal);
  std::vector<std::vector<float>> got;
  for (Transport t : {Transport::kGrpc, Transport::kShm}) {
    v1::JobSpec spec = Spec(8, 2, v1::ENCODING_BF16);
    spec.mutable_wire()->set_pre_reduce(true);
    ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    testing::TrainRun run =
        testing::TrainInProcess(spec, 2, nullptr, nullptr, t);
    for (int w = 0; w < 2; ++w) {
      ASSERT_EQ(run.errors[w], "") << testing::TransportName(t) << " worker " << w;
      EXPECT_EQ(run.results[w].progress.step(), 20);
    }
    EXPECT_EQ(run.results[1].params, run.results[0].params)
        << testing::TransportName(t);
    EXPECT_EQ(run.group_members, 2) << "one member named on each shard";
    got.push_back(std::move(run.results[0].params));
  }
  EXPECT_EQ(got[0], got[1]) << "the transports round the group's sum differently";
  EXPECT_NE(got[0], fp32[0]) << "nothing was rounded";
  EXPECT_LE(RelativeNormDifference(got[0], fp32[0]), 1e-2);
}

// Shards that do not map the workers' segments (fulcrum-server
// --shared_memory=false here; another uid or a full /dev/shm alike) leave
// every stream on TCP: training is bit for bit TCP's, and each refusal is
// counted - nothing for the user to handle.
TEST(SharedMemoryFallbackTest, RefusedSegmentsLeaveTheStreamsOnTcp) {
  const v1::JobSpec spec = Spec(8, 2);
  const testing::TrainRun tcp =
      testing::TrainInProcess(spec, 2, nullptr, nullptr, Transport::kGrpc);
  const testing::TrainRun refused = testing::TrainInProcess(
      spec, 2, nullptr, nullptr, Transport::kShm, /*shards_map_shm=*/false);
  for (int w = 0; w < 2; ++w) {
    ASSERT_EQ(refused.errors[w], "") << "worker " << w;
    ASSERT_EQ(tcp.errors[w], "") << "worker " << w;
    EXPECT_EQ(refused.results[w].progress.step(), 20);
    EXPECT_EQ(refused.results[w].params, tcp.results[w].params);
  }
  EXPECT_EQ(refused.shm_mapped, 0);
  EXPECT_GE(refused.shm_refused, 2 * 2) << "2 workers x 2 shards offered";
}

// Compressed wires: what travels is rounded identically by the gRPC frames
// and the in-process channel (bit for bit: two workers' sums do not depend
// on arrival order), every worker agrees, the rounding really happened
// (not fp32), and it costs little (20 steps stay close to fp32's).
class CompressedWireTest
    : public ::testing::TestWithParam<std::tuple<v1::Encoding, v1::Encoding>> {
};

TEST_P(CompressedWireTest, BothTransportsRoundAlikeAndStayCloseToFp32) {
  const auto [gradients, parameters] = GetParam();
  const std::vector<std::vector<float>> fp32 = Train(2, 8, 2, Transport::kLocal);
  const std::vector<std::vector<float>> grpc =
      Train(2, 8, 2, Transport::kGrpc, gradients, parameters);
  const std::vector<std::vector<float>> local =
      Train(2, 8, 2, Transport::kLocal, gradients, parameters);
  const std::vector<std::vector<float>> shm =
      Train(2, 8, 2, Transport::kShm, gradients, parameters);
  ASSERT_EQ(grpc.size(), 2u);
  ASSERT_EQ(local.size(), 2u);
  ASSERT_EQ(shm.size(), 2u);
  EXPECT_EQ(grpc[0], grpc[1]) << "workers disagree";
  EXPECT_EQ(grpc[0], local[0]) << "the transports round differently";
  EXPECT_EQ(shm[0], grpc[0]) << "shared memory rounds differently";
  EXPECT_NE(grpc[0], fp32[0]) << "nothing was rounded";
  const double diff = RelativeNormDifference(grpc[0], fp32[0]);
  EXPECT_LE(diff, 1e-2);  // bf16 parameters alone: ~2^-9 per element
  RecordProperty("relative_difference_to_fp32", std::to_string(diff));
  std::cerr << "relative difference to fp32: " << diff << "\n";
}

INSTANTIATE_TEST_SUITE_P(
    Encodings, CompressedWireTest,
    ::testing::Values(std::make_tuple(v1::ENCODING_BF16, v1::ENCODING_FP32),
                      std::make_tuple(v1::ENCODING_FP16, v1::ENCODING_FP32),
                      std::make_tuple(v1::ENCODING_FP32, v1::ENCODING_BF16),
                      std::make_tuple(v1::ENCODING_BF16, v1::ENCODING_BF16)),
    [](const auto& info) {
      return absl::StrCat(
          v1::Encoding_Name(std::get<0>(info.param)).substr(9), "_",
          v1::Encoding_Name(std::get<1>(info.param)).substr(9));
    });

// Top-k sparsified gradients with error feedback (wire.topk). Keeping
// every element is the dense wire, bit for bit, through the sparse path
// (indices and all); keeping 10% rounds alike on both transports, every
// worker agrees, it is not the dense result, and it ends near dense
// training's parameters (the residual carries what each step leaves out).
double Norm(const std::vector<float>& a, const std::vector<float>& b) {
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += std::pow(double{a[i]} - b[i], 2);
  return std::sqrt(d2);
}

TEST(TopKWireTest, EveryElementKeptIsTheDenseWire) {
  for (Transport transport :
       {Transport::kGrpc, Transport::kShm, Transport::kLocal}) {
    const std::vector<std::vector<float>> dense = Train(2, 8, 2, transport);
    const std::vector<std::vector<float>> all = Train(
        2, 8, 2, transport, v1::ENCODING_FP32, v1::ENCODING_FP32, 1.0);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0], dense[0]) << testing::TransportName(transport);
    EXPECT_EQ(all[1], dense[1]);
  }
}

TEST(TopKWireTest, TenPercentRoundsAlikeOnBothTransportsAndStillTrains) {
  const std::vector<std::vector<float>> dense = Train(2, 8, 2, Transport::kLocal);
  const std::vector<std::vector<float>> grpc = Train(
      2, 8, 2, Transport::kGrpc, v1::ENCODING_FP32, v1::ENCODING_FP32, 0.1);
  const std::vector<std::vector<float>> local = Train(
      2, 8, 2, Transport::kLocal, v1::ENCODING_FP32, v1::ENCODING_FP32, 0.1);
  const std::vector<std::vector<float>> shm = Train(
      2, 8, 2, Transport::kShm, v1::ENCODING_FP32, v1::ENCODING_FP32, 0.1);
  ASSERT_EQ(grpc.size(), 2u);
  ASSERT_EQ(local.size(), 2u);
  ASSERT_EQ(shm.size(), 2u);
  EXPECT_EQ(grpc[0], grpc[1]) << "workers disagree";
  EXPECT_EQ(grpc[0], local[0]) << "the transports sparsify differently";
  EXPECT_EQ(shm[0], grpc[0]) << "shared memory sparsifies differently";
  EXPECT_NE(grpc[0], dense[0]) << "nothing was left out";
  auto layout = ParameterLayout::ForMlp({144, 32, 16, 4}, 2, 4096);
  std::vector<float> init(layout->total_size());
  InitializeParameters(*layout, 42, 0, layout->total_size(), init.data());
  const double moved = Norm(grpc[0], init), dense_moved = Norm(dense[0], init);
  std::cerr << "moved " << moved << " (dense " << dense_moved
            << "), from dense " << Norm(grpc[0], dense[0]) << "\n";
  EXPECT_GT(moved, 0.5 * dense_moved);
  EXPECT_LT(moved, 1.5 * dense_moved);
  // Where it ends: within a quarter of dense training's way from dense's
  // end (measured: 0.13 with error feedback; 0.46 without it, the
  // residual dropped each step).
  EXPECT_LT(Norm(grpc[0], dense[0]), 0.25 * dense_moved);
}

// Random-k (wire.randomk) at 10%: the positions are drawn from the
// worker's seed, the step and the chunk, so the transports still agree bit
// for bit and so do the workers; it is neither the dense wire nor top-k,
// and with error feedback it still trains toward dense's end.
TEST(RandomKWireTest, TenPercentRoundsAlikeOnEveryTransportAndStillTrains) {
  const std::vector<std::vector<float>> dense = Train(2, 8, 2, Transport::kLocal);
  const std::vector<std::vector<float>> topk = Train(
      2, 8, 2, Transport::kLocal, v1::ENCODING_FP32, v1::ENCODING_FP32, 0.1);
  std::vector<std::vector<std::vector<float>>> runs;
  for (Transport transport :
       {Transport::kLocal, Transport::kGrpc, Transport::kShm}) {
    runs.push_back(Train(2, 8, 2, transport, v1::ENCODING_FP32,
                         v1::ENCODING_FP32, 0.1, /*random=*/true));
    ASSERT_EQ(runs.back().size(), 2u) << testing::TransportName(transport);
    EXPECT_EQ(runs.back()[0], runs.back()[1])
        << "workers disagree on " << testing::TransportName(transport);
    EXPECT_EQ(runs.back()[0], runs[0][0])
        << testing::TransportName(transport) << " draws differently";
  }
  const std::vector<float>& random = runs[0][0];
  EXPECT_NE(random, dense[0]) << "nothing was left out";
  EXPECT_NE(random, topk[0]) << "random-k chose the largest";
  auto layout = ParameterLayout::ForMlp({144, 32, 16, 4}, 2, 4096);
  std::vector<float> init(layout->total_size());
  InitializeParameters(*layout, 42, 0, layout->total_size(), init.data());
  const double moved = Norm(random, init), dense_moved = Norm(dense[0], init);
  std::cerr << "moved " << moved << " (dense " << dense_moved
            << "), from dense " << Norm(random, dense[0]) << " (top-k "
            << Norm(topk[0], dense[0]) << ")\n";
  EXPECT_GT(moved, 0.5 * dense_moved);
  EXPECT_LT(moved, 1.5 * dense_moved);
  // Measured: 0.59 of dense's way from dense's end (top-k: 0.13), having
  // moved 0.63 of dense's distance; with the residual dropped each step
  // (no error feedback) it moved 0.16 and ended 0.91 away - both fail.
  EXPECT_LT(Norm(random, dense[0]), 0.75 * dense_moved);
}

// The trainer's device path (staging copies; gradient buckets copied out
// asynchronously while backward goes on; parameters copied in partition by
// partition as they arrive) on a simulated GPU whose copies land as late as
// a real one's may, and which fails on any unordered access: the same
// parameters as the host path (two workers: a two-term sum does not depend
// on arrival order).
TEST(DevicePathTest, ASimulatedGpuTrainsExactlyLikeTheHost) {
  for (Transport transport : {Transport::kGrpc, Transport::kLocal})
  for (int shards : {1, 3}) {
    const v1::JobSpec spec = Spec(8, shards);
    testing::TrainRun host =
        testing::TrainInProcess(spec, 2, nullptr, nullptr, transport);
    testing::TrainRun device = testing::TrainInProcess(
        spec, 2, nullptr,
        [] { return std::make_unique<SimulatedDeviceBackend>(); }, transport);
    auto layout = ParameterLayout::ForMlp({144, 32, 16, 4}, shards, 4096);
    ASSERT_TRUE(layout.ok());
    const int64_t parts = static_cast<int64_t>(layout->partitions().size());
    for (int w = 0; w < 2; ++w) {
      ASSERT_EQ(host.errors[w], "");
      ASSERT_EQ(device.errors[w], "") << shards << " shards";
      EXPECT_EQ(device.results[w].progress.step(), 20);
      // Bit for bit where OpenBLAS sums the host path's per-partition
      // products as it sums the whole (as on the machines this was written
      // on); an AMD EPYC (AVX2 kernels) rounds the last bits differently. A
      // stale or raced parameter differs by far more.
      EXPECT_LE(RelativeNormDifference(device.results[w].params,
                                       host.results[w].params),
                1e-6)
          << "worker " << w << ", " << shards << " shards";
      const auto* sim =
          static_cast<const SimulatedDeviceBackend*>(device.backends[w].get());
      EXPECT_TRUE(sim->status().ok()) << sim->status();
      // The asynchronous paths were taken: every step's parameters went in
      // partition by partition, its gradients out in buckets.
      EXPECT_EQ(sim->async_to_device(), 20 * parts);
      EXPECT_GE(sim->async_to_host(), 20);
    }
    EXPECT_EQ(device.results[0].progress.test_accuracy(),
              host.results[0].progress.test_accuracy());
  }
}

}  // namespace
}  // namespace fulcrum
