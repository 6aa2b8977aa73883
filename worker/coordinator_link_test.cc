// CoordinatorLink's registration against a scripted coordinator (issue 38,
// item 5): a coordinator at its limits (RESOURCE_EXHAUSTED) is asked again
// with backoff; any other refusal is final and returned; a worker the
// coordinator forgot keeps heartbeating and registers again, even after a
// refused re-registration (it once stopped heartbeating for good).
#include "worker/coordinator_link.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <deque>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/net/grpc_options.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// Answers RegisterWorker from a script (then OK with ids w-1, w-2, ...) and
// heartbeats with OK, or NOT_FOUND for ids it was told to forget.
class ScriptedCoordinator final : public v1::Coordinator::Service {
 public:
  void RefuseRegistrations(std::deque<grpc::Status> answers) {
    absl::MutexLock lock(&mu_);
    registrations_ = std::move(answers);
  }
  void Forget(const std::string& id) {
    absl::MutexLock lock(&mu_);
    forgotten_ = id;
  }
  int register_calls() {
    absl::MutexLock lock(&mu_);
    return register_calls_;
  }
  int heartbeats(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return id == last_heartbeat_id_ ? heartbeats_ : 0;
  }

  grpc::Status RegisterWorker(grpc::ServerContext*,
                              const v1::RegisterWorkerRequest*,
                              v1::RegisterWorkerResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++register_calls_;
    if (!registrations_.empty()) {
      grpc::Status s = registrations_.front();
      registrations_.pop_front();
      return s;
    }
    response->set_worker_id(absl::StrCat("w-", ++next_id_));
    response->set_heartbeat_interval_ms(50);
    response->set_lease_ms(1000);
    return grpc::Status::OK;
  }

  grpc::Status WorkerHeartbeat(grpc::ServerContext*,
                               const v1::WorkerHeartbeatRequest* request,
                               v1::WorkerHeartbeatResponse*) override {
    absl::MutexLock lock(&mu_);
    if (request->worker_id() == forgotten_)
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker");
    if (request->worker_id() != last_heartbeat_id_) heartbeats_ = 0;
    last_heartbeat_id_ = request->worker_id();
    ++heartbeats_;
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  std::deque<grpc::Status> registrations_ ABSL_GUARDED_BY(mu_);
  std::string forgotten_ ABSL_GUARDED_BY(mu_);
  std::string last_heartbeat_id_ ABSL_GUARDED_BY(mu_);
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int register_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    ConfigureServer(&builder);  // the coordinator's keepalive policy
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    options_.coordinator = absl::StrCat("127.0.0.1:", port);
    options_.log_prefix = "coordinator_link_test";
  }
  void TearDown() override { server_->Shutdown(); }

  // Waits up to 10 s for `done`.
  template <typename F>
  bool Eventually(F done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }

  ScriptedCoordinator coordinator_;
  std::unique_ptr<grpc::Server> server_;
  CoordinatorLink::Options options_;
};

grpc::Status Exhausted() {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "Server Threadpool Exhausted");
}

TEST_F(CoordinatorLinkTest, RegistrationAtTheCoordinatorsLimitIsRetried) {
  coordinator_.RefuseRegistrations({Exhausted(), Exhausted(), Exhausted()});
  CoordinatorLink link(options_);
  ASSERT_TRUE(link.Start().ok());
  EXPECT_EQ(coordinator_.register_calls(), 4);
  EXPECT_TRUE(link.registered());
  EXPECT_EQ(link.worker_id(), "w-1");
  EXPECT_TRUE(Eventually([&] { return coordinator_.heartbeats("w-1") >= 3; }));
  link.Shutdown();
}

TEST_F(CoordinatorLinkTest, AnyOtherRefusalIsFinalAndReturned) {
  coordinator_.RefuseRegistrations(
      {grpc::Status(grpc::StatusCode::NOT_FOUND, "job_id 'job-9' not found")});
  CoordinatorLink link(options_);
  const absl::Status s = link.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("job-9"), std::string::npos) << s;
  EXPECT_EQ(coordinator_.register_calls(), 1);
  EXPECT_FALSE(link.registered());
}

TEST_F(CoordinatorLinkTest, AForgottenWorkerRegistersAgainAfterARefusal) {
  CoordinatorLink link(options_);
  ASSERT_TRUE(link.Start().ok());
  ASSERT_TRUE(Eventually([&] { return coordinator_.heartbeats("w-1") >= 1; }));
  // Forgotten (its lease ran out), and the first re-registration refused.
  coordinator_.RefuseRegistrations({grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED, "registration is closed")});
  coordinator_.Forget("w-1");
  // The heartbeats go on and register again (after 5 s): a new member.
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (coordinator_.heartbeats("w-2") < 3 && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(20));
  EXPECT_GE(coordinator_.heartbeats("w-2"), 3);
  EXPECT_EQ(link.worker_id(), "w-2");
  EXPECT_EQ(coordinator_.register_calls(), 3);
  link.Shutdown();
}

}  // namespace
}  // namespace fulcrum
