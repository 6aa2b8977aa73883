// The core correctness property of synchronous training: with the same seed
// and data order, W workers with batch b produce the same parameters as one
// worker with batch W*b (to float tolerance), whatever the number of shards.
// Real shards (gRPC services on loopback ports) and real trainers, in one
// process.
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "common/config/job_spec.h"
#include "common/net/grpc_options.h"
#include "common/testing/synthetic_idx.h"
#include "gtest/gtest.h"
#include "server/ps/service.h"
#include "server/ps/shard_core.h"
#include "worker/backend/cpu_backend.h"
#include "worker/trainer.h"

namespace fulcrum {
namespace {

struct ShardServer {
  ParameterShard core;
  std::unique_ptr<ParameterServerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::unique_ptr<ShardServer> StartShard() {
  auto s = std::make_unique<ShardServer>();
  s->service = std::make_unique<ParameterServerService>(
      &s->core, ParameterServerService::Options{absl::Seconds(60)});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  ConfigureServer(&builder);
  builder.RegisterService(s->service.get());
  s->server = builder.BuildAndStart();
  s->address = "127.0.0.1:" + std::to_string(port);
  return s;
}

const std::string& DataDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string d =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/equivalence_data";
    EXPECT_TRUE(testing::WriteSyntheticIdx(d, 1000, 100, 12, 4, 9));
    return d;
  }();
  return dir;
}

v1::JobSpec Spec(int batch, int shards) {
  v1::JobSpec spec;
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

// Trains `workers` x `batch` for 20 steps on `shards` shards; returns every
// worker's final parameters.
std::vector<std::vector<float>> Train(int workers, int batch, int shards) {
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::vector<std::string> addresses, ids;
  for (int w = 0; w < workers; ++w) ids.push_back("w" + std::to_string(w));
  const v1::JobSpec spec = Spec(batch, shards);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (int s = 0; s < shards; ++s) {
    servers.push_back(StartShard());
    addresses.push_back(servers.back()->address);
    JobInit init{"job", spec, s, shards, 1, ids};
    EXPECT_TRUE(servers.back()->core.InitJob(init).ok());
  }
  std::vector<std::vector<float>> params(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      CpuBackend backend;
      Trainer trainer(&backend, {ids[w], absl::Seconds(60), 100});
      Assignment a{"job", spec, w, workers, 1, addresses};
      absl::StatusOr<TrainResult> r = trainer.Run(a, nullptr);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->progress.step(), 20);
      params[w] = std::move(r->params);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : servers) s->server->Shutdown(std::chrono::system_clock::now());
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

class SyncEquivalenceTest
    : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(SyncEquivalenceTest, WorkersTimesBatchEqualsOneBigBatch) {
  const auto [workers, shards] = GetParam();
  const int b = 8;
  const std::vector<std::vector<float>> one = Train(1, workers * b, shards);
  const std::vector<std::vector<float>> many = Train(workers, b, shards);
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

INSTANTIATE_TEST_SUITE_P(WorkersAndShards, SyncEquivalenceTest,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values(1, 2, 3)));

}  // namespace
}  // namespace fulcrum
