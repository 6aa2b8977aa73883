// The coordinator's gRPC service on a loopback port: bad input gets the
// documented status code with a message naming the field, and changes
// nothing.
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <functional>
#include <memory>

#include "common/concurrency/executor.h"
#include "common/config/job_spec.h"
#include "common/net/grpc_options.h"
#include "fulcrum/v1/coordinator.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/service.h"
#include "server/coordinator/testing/fake_shards.h"
#include "server/coordinator/testing/test_specs.h"

namespace fulcrum {
namespace {

using testing::NoShards;

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("bad-input");
  spec.mutable_model()->set_type("mlp");
  spec.mutable_model()->add_layers(8);
  spec.mutable_model()->add_layers(4);
  spec.mutable_dataset()->set_dir("/d");
  spec.mutable_optimizer()->set_lr(0.1);
  ApplyDefaults(&spec);
  return spec;
}

// Serves `service` on a kernel-picked loopback port.
std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

TEST(CoordinatorServiceTest, InvalidSpecOverGrpc) {
  NoShards shards;
  Coordinator core({}, &shards);
  CoordinatorService service(&core);
  int port = 0;
  auto server = Serve(&service, &port);
  auto stub = v1::Coordinator::NewStub(
      MakeChannel("127.0.0.1:" + std::to_string(port)));
  struct Case {
    std::function<void(v1::JobSpec*)> mutate;
    std::string message;
  };
  const Case cases[] = {
      {[](v1::JobSpec* s) { s->set_batch_size(0); },
       "batch_size must be in [1, 65536], got 0"},
      {[](v1::JobSpec* s) { s->mutable_consistency()->set_mode("eventual"); },
       "consistency.mode must be one of [sync, ssp, async], got 'eventual'"},
      {[](v1::JobSpec* s) {
         s->mutable_consistency()->set_mode("ssp");
         s->mutable_consistency()->set_staleness(-2);
       },
       "consistency.staleness must be in [0, 1000], got -2"},
      {[](v1::JobSpec* s) { s->mutable_optimizer()->set_lr(0); },
       "optimizer.lr must be > 0, got 0"},
      {[](v1::JobSpec* s) { s->mutable_optimizer()->set_lr(-0.5); },
       "optimizer.lr must be > 0, got -0.5"},
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = Spec();
    c.mutate(request.mutable_spec());
    grpc::ClientContext context;
    v1::SubmitJobResponse response;
    grpc::Status s = stub->SubmitJob(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(s.error_message(), c.message);
  }
  EXPECT_TRUE(core.ListJobs().empty());
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(CoordinatorServiceTest, BadChunkLeasesAreRejectedAndChangeNothing) {
  NoShards shards;
  InlineExecutor inline_executor;  // the tick's shard calls done when it returns
  Coordinator::Options options;
  options.start_grace = absl::ZeroDuration();
  options.executor = &inline_executor;
  Coordinator core(options, &shards);
  CoordinatorService service(&core);
  int port = 0;
  auto server = Serve(&service, &port);
  auto stub = v1::Coordinator::NewStub(
      MakeChannel("127.0.0.1:" + std::to_string(port)));
  v1::JobSpec spec = Spec();
  spec.mutable_workers()->set_min(1);
  spec.mutable_workers()->set_max(1);
  const std::string job = *core.SubmitJob(spec);
  const std::string worker = core.RegisterWorker(testing::WorkerOn())->worker_id();
  v1::RegisterShardRequest shard;
  shard.set_address("127.0.0.1:1");
  ASSERT_TRUE(core.RegisterShard(shard).ok());
  core.Tick();
  ASSERT_EQ(core.GetJob(job)->state(), v1::RUNNING);
  auto lease = [&](const std::string& w, const std::string& j,
                   int64_t generation, int64_t size) {
    v1::LeaseChunkRequest request;
    request.set_worker_id(w);
    request.set_job_id(j);
    request.set_generation(generation);
    request.set_dataset_size(size);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::LeaseChunkResponse response;
    return stub->LeaseChunk(&context, request, &response);
  };
  grpc::Status s = lease(worker, job, 1, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("dataset_size"), std::string::npos);
  s = lease(worker, "job-404", 1, 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("job_id"), std::string::npos);
  s = lease("w-77", job, 1, 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("worker_id"), std::string::npos);
  s = lease(worker, job, 5, 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_NE(s.error_message().find("generation"), std::string::npos);
  // None of these leased anything: the first valid call gets chunk 0.
  v1::LeaseChunkRequest request;
  request.set_worker_id(worker);
  request.set_job_id(job);
  request.set_generation(1);
  request.set_dataset_size(100);
  absl::StatusOr<v1::LeaseChunkResponse> first = core.LeaseChunk(request);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->chunk().chunk(), 0);
  EXPECT_EQ(first->chunk().begin(), 0);
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace fulcrum
