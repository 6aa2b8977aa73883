// SparsePull and SparsePush over a loopback port: rows round-trip, repeats
// are harmless, members and credentials are checked, and bad input gets
// INVALID_ARGUMENT (or NOT_FOUND) naming the field with the rows unchanged.
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/config/job_spec.h"
#include "common/embedding/placement.h"
#include "common/metrics/metrics.h"
#include "common/net/grpc_options.h"
#include "common/net/member_credential.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/ps/service.h"
#include "server/ps/shard_collector.h"

namespace fulcrum {
namespace {

constexpr char kKey[] = "coordinator-key";

class SparseRowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_.Set(kKey);
    ParameterServerService::Options options;
    options.coordinator = &coordinator_;
    options.metrics = &metrics_;
    service_ = std::make_unique<ParameterServerService>(&shard_, options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    ConfigureServer(&builder);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    stub_ = v1::ParameterServer::NewStub(
        MakeChannel("127.0.0.1:" + std::to_string(port)));
    // Shard 1 of 2, members w-1 and w-2 of generation 1.
    v1::InitJobRequest init;
    init.set_job_id("job-1");
    auto spec = ParseJobSpec(R"(
name: ctr
model: {type: mlp, layers: [8, 2]}
dataset: {dir: /d}
optimizer: {type: sgd, lr: 0.1}
shards: 2
embeddings:
  - {name: user, dim: 4, capacity: 100, optimizer: {type: sgd, lr: 1.0}}
  - {name: item, dim: 2, capacity: 100, min_count: 2, optimizer: {lr: 0.1}}
)");
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
    *init.mutable_spec() = *spec;
    init.set_shard_index(1);
    init.set_num_shards(2);
    init.set_generation(1);
    init.add_workers("w-1");
    init.add_workers("w-2");
    grpc::ClientContext context;
    context.AddMetadata(kCoordinatorMetadataKey, kKey);
    v1::InitJobResponse response;
    grpc::Status s = stub_->InitJob(&context, init, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    for (uint64_t id = 0; mine_.size() < 8; ++id) {
      if (ShardOfRow(id, 2) == 1) mine_.push_back(id);
      else if (theirs_.empty()) theirs_.push_back(id);
    }
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now());
  }

  template <typename Request>
  void As(const std::string& worker, Request* r) {
    r->set_job_id("job-1");
    r->set_worker_id(worker);
    r->set_generation(1);
    r->set_credential(StreamCredential(kKey, "job-1", worker));
  }

  grpc::Status PullRows(const std::string& table,
                        const std::vector<uint64_t>& ids,
                        std::vector<float>* out,
                        const std::function<void(v1::SparsePullRequest*)>&
                            edit = nullptr) {
    v1::SparsePullRequest r;
    As("w-1", &r);
    r.set_table(table);
    for (uint64_t id : ids) r.add_ids(id);
    if (edit) edit(&r);
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(10));
    v1::SparsePullResponse response;
    grpc::Status s = stub_->SparsePull(&context, r, &response);
    if (s.ok()) {
      out->resize(response.rows().size() / 4);
      std::memcpy(out->data(), response.rows().data(), response.rows().size());
      EXPECT_EQ(out->size(), ids.size() * response.dim());
    }
    return s;
  }

  std::vector<float> Rows(const std::string& table = "user") {
    std::vector<float> out;
    EXPECT_TRUE(PullRows(table, mine_, &out).ok());
    return out;
  }

  v1::SparsePushRequest PushOf(const std::vector<uint64_t>& ids, float g,
                               int dim = 4) {
    v1::SparsePushRequest r;
    As("w-1", &r);
    r.set_table(dim == 4 ? "user" : "item");
    r.set_step(0);
    r.set_chunks(1);
    for (uint64_t id : ids) r.add_ids(id);
    std::vector<float> grads(ids.size() * dim, g);
    r.set_gradients(std::string(reinterpret_cast<const char*>(grads.data()),
                                grads.size() * 4));
    return r;
  }

  grpc::Status Push(const v1::SparsePushRequest& r,
                    v1::SparsePushResponse* response = nullptr) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(10));
    v1::SparsePushResponse ignored;
    return stub_->SparsePush(&context, r, response ? response : &ignored);
  }

  void ExpectRejected(const v1::SparsePushRequest& r, grpc::StatusCode code,
                      const std::string& text) {
    const std::vector<float> before = Rows();
    grpc::Status s = Push(r);
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(text), std::string::npos)
        << s.error_message();
    EXPECT_EQ(Rows(), before) << "a rejected push changed rows";
  }

  SharedCredential coordinator_;
  metrics::Registry registry_;
  ShardMetrics metrics_{registry_};
  ParameterShard shard_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  std::vector<uint64_t> mine_, theirs_;
};

TEST_F(SparseRowsTest, PushedRowsComeBackStepped) {
  const std::vector<float> before = Rows();
  for (float v : before) {
    EXPECT_LE(std::abs(v), 0.01f);  // uniform(-0.01, 0.01), the default
  }
  EXPECT_NE(before, std::vector<float>(before.size(), 0.0f));
  v1::SparsePushResponse response;
  ASSERT_TRUE(Push(PushOf(mine_, 0.5f), &response).ok());
  EXPECT_EQ(response.applied(), 8);
  EXPECT_FALSE(response.repeat());
  std::vector<float> after = Rows();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 0.5f);
  // The same request again is acknowledged and applies nothing.
  ASSERT_TRUE(Push(PushOf(mine_, 0.5f), &response).ok());
  EXPECT_TRUE(response.repeat());
  EXPECT_EQ(Rows(), after);

  // min_count 2: the first push is counted, the second creates the row.
  const std::vector<float> item = Rows("item");
  ASSERT_TRUE(Push(PushOf({mine_[0]}, 1.0f, 2), &response).ok());
  EXPECT_EQ(response.pending(), 1);
  EXPECT_EQ(Rows("item"), item);
  v1::SparsePushRequest second = PushOf({mine_[0]}, 1.0f, 2);
  second.set_step(1);
  ASSERT_TRUE(Push(second, &response).ok());
  EXPECT_EQ(response.applied(), 1);
  EXPECT_NE(Rows("item"), item);

  // The scrape sees the tables.
  CollectShardState(shard_, &metrics_);
  const std::string text = registry_.Expose();
  EXPECT_NE(text.find("fulcrum_server_embedding_rows{job_id=\"job-1\",table=\"user\"} 8"),
            std::string::npos) << text;
  EXPECT_NE(text.find("fulcrum_server_embedding_pending_pushes_total{job_id=\"job-1\",table=\"item\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("fulcrum_server_embedding_pushed_rows_total{job_id=\"job-1\",table=\"user\"} 8"),
            std::string::npos);
  EXPECT_NE(text.find("fulcrum_server_embedding_evicted_rows_total{job_id=\"job-1\",table=\"user\",reason=\"ttl\"} 0"),
            std::string::npos);
}

TEST_F(SparseRowsTest, MembersAndCredentialsAreChecked) {
  std::vector<float> out;
  auto with = [&](auto edit) {
    v1::SparsePushRequest r = PushOf(mine_, 1.0f);
    edit(&r);
    return r;
  };
  ExpectRejected(with([](auto* r) { r->set_credential("forged"); }),
                 grpc::StatusCode::PERMISSION_DENIED, "credential");
  ExpectRejected(with([](auto* r) {
                   r->set_worker_id("w-9");
                   r->set_credential(StreamCredential(kKey, "job-1", "w-9"));
                 }),
                 grpc::StatusCode::PERMISSION_DENIED, "not a member");
  ExpectRejected(with([](auto* r) { r->set_generation(0); }),
                 grpc::StatusCode::ABORTED, "generation");
  ExpectRejected(with([](auto* r) { r->set_generation(2); }),
                 grpc::StatusCode::UNAVAILABLE, "retry");
  ExpectRejected(with([](auto* r) {
                   r->set_job_id("job-2");
                   r->set_credential(StreamCredential(kKey, "job-2", "w-1"));
                 }),
                 grpc::StatusCode::NOT_FOUND, "job-2");
  grpc::Status s = PullRows("user", mine_, &out, [](v1::SparsePullRequest* r) {
    r->set_credential("");
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(SparseRowsTest, BadInputNamesTheField) {
  auto with = [&](auto edit) {
    v1::SparsePushRequest r = PushOf(mine_, 1.0f);
    edit(&r);
    return r;
  };
  ExpectRejected(with([](auto* r) { r->set_table("nope"); }),
                 grpc::StatusCode::NOT_FOUND, "table: the job has no embedding table 'nope'");
  ExpectRejected(with([&](auto* r) { r->set_ids(1, theirs_[0]); }),
                 grpc::StatusCode::INVALID_ARGUMENT, "ids[1] = ");
  ExpectRejected(with([&](auto* r) { r->set_ids(2, r->ids(0)); }),
                 grpc::StatusCode::INVALID_ARGUMENT, "ids[2] = ");
  ExpectRejected(with([](auto* r) { r->mutable_gradients()->resize(5); }),
                 grpc::StatusCode::INVALID_ARGUMENT, "gradients: 5 bytes, want 128");
  ExpectRejected(with([](auto* r) {
                   const float inf = std::numeric_limits<float>::infinity();
                   std::memcpy(r->mutable_gradients()->data() + 4 * 9, &inf, 4);
                 }),
                 grpc::StatusCode::INVALID_ARGUMENT, "gradients[9] (row 2");
  ExpectRejected(with([](auto* r) { r->add_counts(3); }),
                 grpc::StatusCode::INVALID_ARGUMENT, "counts: 1 entries for 8 ids");
  ExpectRejected(with([](auto* r) { r->set_chunks(0); }),
                 grpc::StatusCode::INVALID_ARGUMENT, "chunks must be in [1, 64]");
  ExpectRejected(with([](auto* r) { r->set_chunk(1); }),
                 grpc::StatusCode::INVALID_ARGUMENT, "chunk must be in [0, chunks)");
  ExpectRejected(with([](auto* r) { r->set_step(-3); }),
                 grpc::StatusCode::INVALID_ARGUMENT, "step must be >= 0");
  std::vector<float> out;
  grpc::Status s = PullRows("user", {mine_[0], theirs_[0]}, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("ids[1] = "), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("held by shard 0, not shard 1"), std::string::npos);
  // Every rejection was counted by its code.
  EXPECT_GE(metrics_.rejected_pushes.WithLabels({"invalid_argument"}).Value(), 9);
}

}  // namespace
}  // namespace fulcrum
