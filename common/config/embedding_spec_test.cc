#include "common/config/embedding_spec.h"

#include <string>

#include "common/config/job_spec.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

constexpr char kJob[] = R"(
name: ctr
model: {type: external}
optimizer: {type: adam, lr: 0.001}
shards: 2
)";

absl::StatusOr<v1::JobSpec> Parse(const std::string& embeddings) {
  auto spec = ParseJobSpec(std::string(kJob) + embeddings);
  if (!spec.ok()) return spec.status();
  absl::Status s = ValidateJobSpec(*spec);
  if (!s.ok()) return s;
  return spec;
}

std::string Error(const std::string& table) {
  auto spec = Parse("embeddings:\n  - " + table + "\n");
  return spec.ok() ? "OK" : std::string(spec.status().message());
}

TEST(EmbeddingSpecTest, DefaultsFillEveryTable) {
  auto spec = Parse(R"(
embeddings:
  - {name: user, dim: 16, capacity: 1000001, optimizer: {lr: 0.05}}
  - name: item
    dim: 8
    capacity: 10
    init: {type: normal, scale: 0.1}
    optimizer: {type: adam, lr: 0.01}
    eviction: lfu
    min_count: 3
    ttl_seconds: 3600
    staleness: 2
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->embeddings_size(), 2);
  const v1::EmbeddingTableSpec& user = spec->embeddings(0);
  EXPECT_EQ(user.init().type(), "uniform");
  EXPECT_DOUBLE_EQ(user.init().scale(), kDefaultEmbeddingInitScale);
  EXPECT_EQ(user.optimizer().type(), "adagrad");
  EXPECT_DOUBLE_EQ(user.optimizer().eps(), 1e-10);
  EXPECT_EQ(user.eviction(), "lru");
  EXPECT_EQ(user.min_count(), 1);
  EXPECT_EQ(user.ttl_seconds(), 0);
  EXPECT_EQ(RowsPerShard(user, 2), 500001);  // rounded up
  const v1::EmbeddingTableSpec& item = spec->embeddings(1);
  EXPECT_EQ(item.init().type(), "normal");
  EXPECT_DOUBLE_EQ(item.optimizer().beta1(), 0.9);
  EXPECT_DOUBLE_EQ(item.optimizer().beta2(), 0.999);
  EXPECT_DOUBLE_EQ(item.optimizer().eps(), 1e-8);
  EXPECT_EQ(item.eviction(), "lfu");
  EXPECT_EQ(item.min_count(), 3);
  EXPECT_EQ(item.ttl_seconds(), 3600);
  EXPECT_EQ(item.staleness(), 2);
  EXPECT_FALSE(user.has_staleness());
}

TEST(EmbeddingSpecTest, ErrorsNameTheField) {
  const std::string ok = "name: t, capacity: 10, optimizer: {lr: 0.1}";
  EXPECT_EQ(Error("{dim: 4, " + ok + "}"), "OK");
  struct Case {
    std::string table;
    std::string message;
  } cases[] = {
      {"{" + ok + "}", "embeddings[0].dim must be in [1, 1024], got 0"},
      {"{dim: 2000, " + ok + "}", "embeddings[0].dim must be in"},
      {"{dim: 4, name: T, capacity: 10, optimizer: {lr: 0.1}}",
       "embeddings[0].name must be 1 to 64 of [a-z0-9_]"},
      {"{dim: 4, name: t, optimizer: {lr: 0.1}}",
       "embeddings[0].capacity must be >= 1"},
      {"{dim: 4, name: t, capacity: 10}", "embeddings[0].optimizer.lr must be > 0"},
      {"{dim: 4, " + ok + ", eviction: fifo}",
       "embeddings[0].eviction must be one of [lru, lfu]"},
      {"{dim: 4, " + ok + ", min_count: 0}", "embeddings[0].min_count must be in [1, 255]"},
      {"{dim: 4, " + ok + ", min_count: 256}", "embeddings[0].min_count"},
      {"{dim: 4, " + ok + ", ttl_seconds: -1}", "embeddings[0].ttl_seconds must be in"},
      {"{dim: 4, " + ok + ", staleness: -1}", "embeddings[0].staleness must be in [0, 1000]"},
      {"{dim: 4, " + ok + ", staleness: 1001}", "embeddings[0].staleness must be in [0, 1000]"},
      {"{dim: 4, " + ok + ", init: {type: ones}}",
       "embeddings[0].init.type must be one of [uniform, normal, zeros]"},
      {"{dim: 4, " + ok + ", init: {type: zeros, scale: 1}}",
       "embeddings[0].init.scale applies to uniform and normal only"},
      {"{dim: 4, " + ok + ", init: {scale: -1}}", "embeddings[0].init.scale must be > 0"},
      {"{dim: 4, " + ok + ", init: {scale: .nan}}", "embeddings[0].init.scale must be > 0"},
      {"{dim: 4, name: t, capacity: 10, optimizer: {type: ftrl, lr: 1}}",
       "embeddings[0].optimizer.type must be one of [adagrad, adam, sgd]"},
      {"{dim: 4, name: t, capacity: 10, optimizer: {lr: 1, beta1: 0.9}}",
       "embeddings[0].optimizer.beta1 beta1/beta2 apply to adam only"},
      {"{dim: 4, name: t, capacity: 10, optimizer: {type: adam, lr: 1, beta2: 1}}",
       "embeddings[0].optimizer.beta2 must be in [0, 1)"},
      {"{dim: 4, name: t, capacity: 10, optimizer: {type: sgd, lr: 1, eps: 1}}",
       "embeddings[0].optimizer.eps applies to adagrad and adam only"},
      {"{dim: 4, name: t, capacity: 10, optimizer: {type: adam, lr: 1, "
       "initial_accumulator: 0.1}}",
       "embeddings[0].optimizer.initial_accumulator applies to adagrad only"},
      {"{dim: 4, " + ok + ", size: 3}", "unknown field 'embeddings[0].size'"},
      {"{dim: x, " + ok + "}", "embeddings[0].dim must be an integer"},
      {"{dim: 4, name: t, capacity: 8589934593, optimizer: {lr: 0.1}}",
       "embeddings[0].capacity must be at most 2147483648 rows per shard"},
  };
  for (const Case& c : cases) {
    EXPECT_NE(Error(c.table).find(c.message), std::string::npos)
        << c.table << "\n  got: " << Error(c.table);
  }
  auto twice = Parse(R"(
embeddings:
  - {name: t, dim: 4, capacity: 10, optimizer: {lr: 0.1}}
  - {name: t, dim: 8, capacity: 10, optimizer: {lr: 0.1}}
)");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(),
            "embeddings[1].name 't' is declared twice");
  auto not_a_list = Parse("embeddings: {name: t}\n");
  ASSERT_FALSE(not_a_list.ok());
  EXPECT_EQ(not_a_list.status().message(),
            "embeddings must be a list of tables");
}

TEST(EmbeddingSpecTest, AtMostSixtyFourTables) {
  v1::JobSpec spec;
  for (int i = 0; i <= kMaxEmbeddingTables; ++i) {
    auto* t = spec.add_embeddings();
    t->set_name("t" + std::to_string(i));
    t->set_dim(4);
    t->set_capacity(10);
    t->mutable_optimizer()->set_lr(0.1);
  }
  ApplyEmbeddingDefaults(&spec);
  absl::Status s = ValidateEmbeddingTables(spec);
  EXPECT_EQ(s.message(), "embeddings must have at most 64 tables, got 65");
  spec.mutable_embeddings()->RemoveLast();
  EXPECT_TRUE(ValidateEmbeddingTables(spec).ok());
}

}  // namespace
}  // namespace fulcrum
