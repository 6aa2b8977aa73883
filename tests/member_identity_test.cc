// Member identity over real connections (issue 16, items 3 and 7): every
// process of a cluster may share one TLS certificate, so each member proves
// who it is with the credential the coordinator gave it, and a shard obeys
// only the coordinator. While a job trains, forged calls - a Leave for a
// worker, a ReportProgress claiming rank 0 finished, EndJob and Pull sent
// straight to a shard, a RegisterShard at a live shard's address, a hello
// as a member - are refused (UNAUTHENTICATED without a credential,
// PERMISSION_DENIED with a wrong one, FAILED_PRECONDITION for the address)
// and change nothing: the job trains to the end with its members.
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "common/net/grpc_options.h"
#include "common/net/member_credential.h"
#include "common/testing/process.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/job_waits.h"
#include "tests/process_cluster.h"

namespace fulcrum {
namespace {

using testing::ProcessCluster;

class MemberIdentityTest : public ::testing::Test {
 protected:
  MemberIdentityTest()
      : cluster_("identity", {.shards = 1,
                              .workers = 2,
                              .worker_flags = {"--inject_step_delay_ms=15"}}) {}

  void SetUp() override {
    ASSERT_FALSE(cluster_.address().empty()) << cluster_.Logs();
    const std::string path = testing::TestTempDir() + "/identity.yaml";
    std::ofstream(path) << R"(name: identity
model: {type: mlp, layers: [784, 32, 10]}
dataset: {dir: /usr/share/datasets/fashion-mnist, train_limit: 6000, test_limit: 1000}
optimizer: {type: momentum, lr: 0.02, momentum: 0.9}
batch_size: 32
epochs: 2
workers: {min: 2, max: 2}
)";
    job_ = testing::SubmitJob(cluster_, path);
    status_ = WaitFor([](const v1::JobStatus& s) {
      return s.state() == v1::RUNNING && s.progress().step() >= 5;
    });
    ASSERT_EQ(status_.state(), v1::RUNNING) << cluster_.Logs();
    coordinator_ = v1::Coordinator::NewStub(MakeChannel(cluster_.address()));
    shard_ = v1::ParameterServer::NewStub(
        MakeChannel(status_.shard_addresses(0)));
  }

  v1::JobStatus WaitFor(const std::function<bool(const v1::JobStatus&)>& done,
                        absl::Duration timeout = absl::Seconds(120)) {
    return testing::WaitForJob(cluster_, job_, done, timeout, "the job");
  }

  // A call context with `claim` ("<id>:<credential>") as the member
  // metadata, or none when empty.
  static void Claim(grpc::ClientContext* c, const std::string& claim) {
    SetTimeout(c, std::chrono::seconds(5));
    if (!claim.empty()) c->AddMetadata(kMemberMetadataKey, claim);
  }

  ProcessCluster cluster_;
  std::string job_;
  v1::JobStatus status_;
  std::unique_ptr<v1::Coordinator::Stub> coordinator_;
  std::unique_ptr<v1::ParameterServer::Stub> shard_;
};

TEST_F(MemberIdentityTest, ForgedMemberCallsAreRefusedAndChangeNothing) {
  const std::string w0 = status_.workers(0), w1 = status_.workers(1);
  const std::string forged = MemberMetadataValue(w1, std::string(64, 'a'));
  // A Leave for a worker, without and with a wrong credential.
  for (const std::string& claim : {std::string(), forged}) {
    grpc::ClientContext c;
    Claim(&c, claim);
    v1::LeaveRequest leave;
    leave.set_member_id(w1);
    v1::LeaveResponse out;
    const grpc::Status s = coordinator_->Leave(&c, leave, &out);
    EXPECT_EQ(s.error_code(), claim.empty()
                                  ? grpc::StatusCode::UNAUTHENTICATED
                                  : grpc::StatusCode::PERMISSION_DENIED)
        << s.error_message();
  }
  // Rank 0 "finished" at step 1 with accuracy 0.99 - as w0, or as w1
  // claiming to be w0.
  for (const std::string& claim :
       {std::string(), MemberMetadataValue(w0, std::string(64, 'b'))}) {
    grpc::ClientContext c;
    Claim(&c, claim);
    v1::ReportProgressRequest report;
    report.set_worker_id(w0);
    report.set_job_id(job_);
    report.set_done(true);
    report.mutable_progress()->set_step(1);
    report.mutable_progress()->set_test_accuracy(0.99);
    report.mutable_progress()->set_evaluated_step(1);
    v1::ReportProgressResponse out;
    const grpc::Status s = coordinator_->ReportProgress(&c, report, &out);
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                s.error_code() == grpc::StatusCode::PERMISSION_DENIED)
        << s.error_message();
  }
  // EndJob and Pull straight to the shard: only the coordinator may.
  {
    grpc::ClientContext c;
    SetTimeout(&c, std::chrono::seconds(5));
    v1::EndJobRequest end;
    end.set_job_id(job_);
    v1::EndJobResponse out;
    const grpc::Status s = shard_->EndJob(&c, end, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();
  }
  {
    grpc::ClientContext c;
    SetTimeout(&c, std::chrono::seconds(5));
    c.AddMetadata(kCoordinatorMetadataKey, std::string(64, 'c'));
    v1::PullRequest pull;
    pull.set_job_id(job_);
    auto reader = shard_->Pull(&c, pull);
    v1::Params p;
    EXPECT_FALSE(reader->Read(&p)) << "no parameters for a forged caller";
    EXPECT_EQ(reader->Finish().error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // A hello as w1 without its stream credential.
  {
    grpc::ClientContext c;
    SetTimeout(&c, std::chrono::seconds(5));
    auto rw = shard_->Stream(&c);
    v1::StreamRequest hello;
    hello.mutable_hello()->set_job_id(job_);
    hello.mutable_hello()->set_worker_id(w1);
    hello.mutable_hello()->set_generation(status_.generation());
    rw->Write(hello);
    rw->WritesDone();
    v1::StreamResponse ignored;
    EXPECT_FALSE(rw->Read(&ignored));
    const grpc::Status s = rw->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << s.error_message();
  }
  // A shard registering at the live shard's address.
  {
    grpc::ClientContext c;
    SetTimeout(&c, std::chrono::seconds(5));
    v1::RegisterShardRequest r;
    r.set_address(status_.shard_addresses(0));
    v1::RegisterShardResponse out;
    const grpc::Status s = coordinator_->RegisterShard(&c, r, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << s.error_message();
  }
  // Nothing changed: the same members and shard, still training, then the
  // job's own end.
  const int64_t at = WaitFor([](const v1::JobStatus&) { return true; })
                         .progress()
                         .step();
  v1::JobStatus s = WaitFor([&](const v1::JobStatus& s) {
    return s.state() != v1::RUNNING || s.progress().step() >= at + 10;
  });
  EXPECT_EQ(s.state(), v1::RUNNING) << s.message() << cluster_.Logs();
  EXPECT_EQ(s.generation(), status_.generation()) << "no membership change";
  EXPECT_EQ(std::vector<std::string>(s.workers().begin(), s.workers().end()),
            (std::vector<std::string>{w0, w1}));
  EXPECT_EQ(s.shards(0), status_.shards(0));
  s = WaitFor([](const v1::JobStatus& s) { return s.state() != v1::RUNNING; },
              absl::Minutes(3));
  EXPECT_EQ(s.state(), v1::SUCCEEDED) << s.message() << cluster_.Logs();
  for (const v1::MembershipEvent& e : s.events())
    EXPECT_NE(e.kind(), "left") << "a forged Leave took " << e.member_id();
}

}  // namespace
}  // namespace fulcrum
