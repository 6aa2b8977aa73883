// Transport security and the API token, over real connections:
// - a coordinator serving mutual TLS with an API token, called by clients
//   with the right and the wrong credentials (no client certificate, another
//   authority's certificate, trusting another authority, plaintext; no token,
//   a wrong token): only the right ones get through, and a refused call
//   changes nothing;
// - a whole cluster of processes (coordinator, 2 servers, 2 workers,
//   fulcrumctl) on mutual TLS with a token trains a job to the end;
// - a server refuses to listen beyond loopback without TLS unless told
//   --insecure.
// The key material is tests/testdata/tls (made by tools/make_certs.sh).
#include <grpcpp/create_channel.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>

#include "common/config/job_spec.h"
#include "common/net/api_token.h"
#include "common/net/grpc_options.h"
#include "common/net/transport.h"
#include "common/testing/process.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/coordinator/testing/fake_shards.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/service.h"
#include "tests/process_cluster.h"

namespace fulcrum {
namespace {

std::string Tls(const std::string& authority, const std::string& file) {
  return testing::Runfile("tests/testdata/tls/" + authority + "/" + file);
}

using testing::NoShards;

v1::JobSpec ValidSpec() {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(R"(
name: secured
model: {type: mlp, layers: [4, 3]}
dataset: {format: idx, dir: /nonexistent}
optimizer: {type: sgd, lr: 0.1}
batch_size: 2
epochs: 1
workers: {min: 1, max: 1}
shards: 1
)");
  EXPECT_TRUE(spec.ok()) << spec.status();
  ApplyDefaults(&*spec);
  return *spec;
}

class SecureCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(UseTransport({Tls("cluster", "tls.crt"),
                              Tls("cluster", "tls.key"),
                              Tls("cluster", "ca.crt")})
                    .ok());
    core_ = std::make_unique<Coordinator>(Coordinator::Options{}, &shards_);
    service_ = std::make_unique<CoordinatorService>(
        core_.get(), ApiToken("t0ken"), [this] { ++refused_; });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", ServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    SetProcessTransport(Transport());  // clients below say what they use
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now());
    SetProcessTransport(Transport());
  }

  // A client stub: TLS trusting `trust`'s CA and presenting `present`'s
  // certificate ("" = none); `trust` "" = plaintext.
  std::unique_ptr<v1::Coordinator::Stub> Client(const std::string& trust,
                                                const std::string& present) {
    std::shared_ptr<grpc::ChannelCredentials> creds =
        grpc::InsecureChannelCredentials();
    if (!trust.empty()) {
      grpc::SslCredentialsOptions o;
      o.pem_root_certs = testing::ReadFile(Tls(trust, "ca.crt"));
      if (!present.empty()) {
        o.pem_cert_chain = testing::ReadFile(Tls(present, "tls.crt"));
        o.pem_private_key = testing::ReadFile(Tls(present, "tls.key"));
      }
      creds = grpc::SslCredentials(o);
    }
    return v1::Coordinator::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port_), creds));
  }

  grpc::Status List(v1::Coordinator::Stub* stub, const std::string& token) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(5));
    AttachToken(&context, token);
    v1::ListJobsResponse response;
    return stub->ListJobs(&context, v1::ListJobsRequest(), &response);
  }
  grpc::Status Submit(v1::Coordinator::Stub* stub, const std::string& token) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(5));
    AttachToken(&context, token);
    v1::SubmitJobRequest request;
    *request.mutable_spec() = ValidSpec();
    v1::SubmitJobResponse response;
    return stub->SubmitJob(&context, request, &response);
  }

  NoShards shards_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<int> refused_{0};
};

TEST_F(SecureCoordinatorTest, MutualTlsWithTheTokenGetsThrough) {
  auto stub = Client("cluster", "cluster");
  EXPECT_TRUE(List(stub.get(), "t0ken").ok());
  EXPECT_EQ(refused_.load(), 0);
  const grpc::Status s = Submit(stub.get(), "t0ken");
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(core_->ListJobs().size(), 1u);
  // Processes' calls are authenticated by their certificate, not the token.
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(5));
  v1::RegisterWorkerResponse registered;
  v1::RegisterWorkerRequest worker;
  worker.set_hostname("host-1");
  EXPECT_TRUE(stub->RegisterWorker(&context, worker, &registered).ok());
  EXPECT_FALSE(registered.worker_id().empty());
}

TEST_F(SecureCoordinatorTest, AMissingOrWrongTokenIsUnauthenticated) {
  auto stub = Client("cluster", "cluster");
  grpc::Status s = List(stub.get(), "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("missing API token"), std::string::npos)
      << s.error_message();
  for (const char* wrong : {"t0ke", "t0ken2", "T0KEN", "x"}) {
    s = Submit(stub.get(), wrong);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << wrong;
    EXPECT_EQ(s.error_message(), "authorization: invalid API token");
  }
  EXPECT_TRUE(core_->ListJobs().empty()) << "a refused submit changed state";
  EXPECT_EQ(refused_.load(), 5) << "every refused call is counted";
}

TEST_F(SecureCoordinatorTest, WrongTransportCredentialsAreRefused) {
  struct Case {
    const char* what;
    std::string trust, present;
  };
  const Case cases[] = {
      {"no client certificate", "cluster", ""},
      {"a certificate of another authority", "cluster", "other"},
      {"trusting another authority", "other", "cluster"},
      {"plaintext", "", ""},
  };
  for (const Case& c : cases) {
    auto stub = Client(c.trust, c.present);
    const grpc::Status s = Submit(stub.get(), "t0ken");
    EXPECT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << c.what << ": " << s.error_message();
  }
  EXPECT_TRUE(core_->ListJobs().empty());
}

TEST(SecureClusterTest, AClusterOnMutualTlsWithATokenTrainsAJob) {
  const std::string token = testing::TestTempDir() + "/token";
  std::ofstream(token) << "cluster-t0ken\n";
  testing::ProcessCluster cluster(
      "tls", {.shards = 2,
              .workers = 2,
              .coordinator_flags = {"--token_file=" + token},
              .all_flags = {"--tls_cert=" + Tls("cluster", "tls.crt"),
                            "--tls_key=" + Tls("cluster", "tls.key"),
                            "--tls_ca=" + Tls("cluster", "ca.crt")},
              .ctl_flags = {"--token_file=" + token}});
  ASSERT_FALSE(cluster.address().empty()) << cluster.Logs();
  const std::string job = testing::TestTempDir() + "/job.yaml";
  std::ofstream(job) << R"(
name: tls
model: {type: mlp, layers: [784, 32, 10]}
dataset: {format: idx, dir: /usr/share/datasets/fashion-mnist, train_limit: 2000, test_limit: 500}
optimizer: {type: momentum, lr: 0.02, momentum: 0.9}
batch_size: 32
epochs: 2
workers: {min: 2, max: 2}
shards: 2
eval_every_steps: 50
)";
  testing::RunResult submit = cluster.Ctl({"submit", job});
  ASSERT_EQ(submit.exit_code, 0) << cluster.Logs();
  const std::string job_id = submit.out.substr(0, submit.out.find('\n'));
  testing::RunResult watch =
      cluster.Ctl({"status", job_id, "--watch"}, absl::Minutes(3));
  EXPECT_EQ(watch.exit_code, 0) << watch.out << cluster.Logs();
  absl::StatusOr<v1::JobStatus> status =
      cluster.StatusWithLedger(job_id, 2 * 2000);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::SUCCEEDED) << cluster.Logs();
  // Both epochs trained, every sample once (2000 samples, 64 a step).
  EXPECT_GE(status->progress().step(), 62);
  ASSERT_EQ(status->epochs_size(), 2);
  for (const v1::EpochSamples& e : status->epochs()) {
    EXPECT_EQ(e.trained(), 2000) << "epoch " << e.epoch();
  }
  EXPECT_NE(testing::ReadFile(cluster.dir() + "/coordinator.log")
                .find("mutual TLS; API token required"),
            std::string::npos);
  EXPECT_NE(testing::ReadFile(cluster.dir() + "/shard-1.log")
                .find("(mutual TLS)"),
            std::string::npos);
}

TEST(ServingTest, PlaintextBeyondLoopbackNeedsInsecure) {
  const std::string log = testing::TestTempDir() + "/refused.log";
  testing::RunResult refused = testing::RunCommand(
      {testing::Runfile("server/ps/fulcrum-server"), "--listen=0.0.0.0:0",
       "--metrics_port=-1"},
      absl::Seconds(20), log);
  EXPECT_EQ(refused.exit_code, 2);
  const std::string text = testing::ReadFile(log);
  EXPECT_NE(text.find("--listen=0.0.0.0:0 is not a loopback address"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("--insecure"), std::string::npos) << text;
  const std::string coordinator_log = testing::TestTempDir() + "/coord.log";
  testing::RunResult coordinator = testing::RunCommand(
      {testing::Runfile("server/coordinator/fulcrum-coordinator"),
       "--listen=0.0.0.0:0", "--metrics_port=-1", "--tls_ca=" + Tls("cluster", "ca.crt")},
      absl::Seconds(20), coordinator_log);
  EXPECT_EQ(coordinator.exit_code, 2);
  EXPECT_NE(testing::ReadFile(coordinator_log).find("--tls_cert"),
            std::string::npos);
}

}  // namespace
}  // namespace fulcrum
