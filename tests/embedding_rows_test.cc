// Embedding rows through both transports: the same pulls and pushes from
// two workers over gRPC (two shard services on loopback) and in process
// leave the same rows bit for bit, repeats included; a stale generation is
// ABORTED on both.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/config/job_spec.h"
#include "gtest/gtest.h"
#include "server/ps/local_row_channel.h"
#include "tests/in_process_cluster.h"
#include "worker/grpc_row_channel.h"
#include "worker/row_client.h"

namespace fulcrum {
namespace {

v1::JobSpec Spec() {
  auto spec = ParseJobSpec(R"(
name: rows
model: {type: mlp, layers: [4, 2]}
dataset: {dir: /d}
optimizer: {type: sgd, lr: 0.1}
shards: 2
seed: 3
chunk_bytes: 2048
embeddings:
  - {name: user, dim: 8, capacity: 300, optimizer: {type: adam, lr: 0.01}}
  - {name: item, dim: 3, capacity: 100000, min_count: 2,
     init: {type: normal, scale: 0.1}, optimizer: {lr: 0.1}}
)");
  EXPECT_TRUE(spec.ok() && ValidateJobSpec(*spec).ok());
  return *spec;
}

struct Rows {
  std::vector<float> user, item;
};

// Two workers, 30 steps each (alternating, so both transports apply in
// one order): Zipf-ish batches with repeats, pulled then pushed, each
// push sent twice (a retry after a lost answer). Returns the final rows.
Rows Train(const std::vector<RowChannel*>& channels) {
  std::vector<RowClient> clients;
  for (RowChannel* c : channels) {
    RowClient::Options o;
    o.shards = 2;
    o.chunk_bytes = 2048;
    o.timeout = absl::Seconds(20);
    clients.emplace_back(c, o);
  }
  std::mt19937_64 rng(11);
  for (int step = 0; step < 30; ++step) {
    for (size_t w = 0; w < clients.size(); ++w) {
      for (const auto& [table, dim] :
           std::vector<std::pair<std::string, int>>{{"user", 8}, {"item", 3}}) {
        std::vector<uint64_t> ids;
        for (int i = 0; i < 200; ++i) {
          const double u = std::uniform_real_distribution<>(0, 1)(rng);
          ids.push_back(static_cast<uint64_t>(std::pow(1000.0, u)));  // skewed
        }
        std::vector<float> rows(ids.size() * dim);
        EXPECT_TRUE(clients[w].Pull(table, dim, ids, rows.data()).ok());
        std::vector<float> grads(rows.size());
        for (size_t i = 0; i < rows.size(); ++i) grads[i] = 0.1f * rows[i] + 0.01f;
        EXPECT_TRUE(clients[w].Push(table, dim, step, ids, grads).ok());
        EXPECT_TRUE(clients[w].Push(table, dim, step, ids, grads).ok());
      }
    }
  }
  std::vector<uint64_t> all;
  for (uint64_t id = 0; id < 1000; ++id) all.push_back(id);
  Rows out;
  out.user.resize(all.size() * 8);
  out.item.resize(all.size() * 3);
  EXPECT_TRUE(clients[0].Pull("user", 8, all, out.user.data()).ok());
  EXPECT_TRUE(clients[0].Pull("item", 3, all, out.item.data()).ok());
  return out;
}

ChannelOptions Member(const std::string& worker, int64_t generation) {
  ChannelOptions o;
  o.job_id = "job-1";
  o.worker_id = worker;
  o.generation = generation;
  return o;
}

TEST(EmbeddingRowsTest, GrpcAndInProcessAgreeBitForBit) {
  const v1::JobSpec spec = Spec();
  const std::vector<std::string> workers = {"w-0", "w-1"};
  // gRPC: two shard services.
  std::vector<std::unique_ptr<testing::ShardServer>> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < 2; ++s) {
    servers.push_back(testing::StartShard());
    addresses.push_back(servers.back()->address);
    JobInit init{"job-1", spec, s, 2, 1, workers};
    ASSERT_TRUE(servers.back()->core.InitJob(init).ok());
  }
  std::vector<std::unique_ptr<RowChannel>> grpc;
  for (const std::string& w : workers) {
    ChannelOptions o = Member(w, 1);
    o.shard_addresses = addresses;
    grpc.push_back(std::make_unique<GrpcRowChannel>(o));
  }
  // In process: two more shard cores.
  std::vector<std::unique_ptr<ParameterShard>> cores;
  std::vector<ParameterShard*> raw;
  for (int s = 0; s < 2; ++s) {
    cores.push_back(std::make_unique<ParameterShard>());
    raw.push_back(cores.back().get());
    JobInit init{"job-1", spec, s, 2, 1, workers};
    ASSERT_TRUE(cores.back()->InitJob(init).ok());
  }
  std::vector<std::unique_ptr<RowChannel>> local;
  for (const std::string& w : workers) {
    local.push_back(std::make_unique<LocalRowChannel>(Member(w, 1), raw));
  }
  const Rows a = Train({grpc[0].get(), grpc[1].get()});
  const Rows b = Train({local[0].get(), local[1].get()});
  EXPECT_EQ(a.user, b.user);
  EXPECT_EQ(a.item, b.item);
  // Rows moved, and the user table stayed within its capacity.
  int64_t resident = 0;
  for (auto& server : servers) {
    auto job = server->core.Find("job-1");
    ASSERT_TRUE(job.ok());
    resident += (*job)->embeddings().Find("user")->stats().resident;
    EXPECT_GT((*job)->embeddings().Find("item")->stats().pending_pushes, 0);
  }
  EXPECT_GT(resident, 100);
  EXPECT_LE(resident, 300);

  // A member of an older generation is told to re-join, on both.
  for (auto& server : servers) {
    auto job = server->core.Find("job-1");
    ASSERT_TRUE((*job)->Adopt(2, workers, std::nullopt).ok());
    ASSERT_TRUE((*job)->Align(2, workers, 0).ok());
  }
  RowClient::Options o;
  o.shards = 2;
  RowClient stale(grpc[0].get(), o);
  std::vector<float> row(8);
  const uint64_t id = 5;
  EXPECT_EQ(stale.Pull("user", 8, {&id, 1}, row.data()).code(),
            absl::StatusCode::kAborted);
  for (auto& server : servers) server->server->Shutdown();
}

}  // namespace
}  // namespace fulcrum
