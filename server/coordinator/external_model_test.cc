// Jobs of external models (fulcrum.torch): workers registered for the job
// declare its tensors; only they train it; rank 0 uploads the values.
#include "common/concurrency/executor.h"
#include "common/config/job_spec.h"
#include "common/testing/fault_injection_env.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/testing/fake_shards.h"
#include "server/coordinator/testing/test_specs.h"

namespace fulcrum {
namespace {

v1::TensorSpec Tensor(const std::string& name, std::vector<int64_t> shape) {
  v1::TensorSpec t;
  t.set_name(name);
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

class ExternalModelTest : public ::testing::Test {
 protected:
  ExternalModelTest() : coordinator_(Options(), &shards_) {}
  Coordinator::Options Options() {
    Coordinator::Options o;
    o.env = &env_;
    o.executor = &inline_;
    return o;
  }
  std::string SubmitExternal() {
    v1::JobSpec spec;
    spec.set_name("torch");
    spec.mutable_model()->set_type("external");
    spec.mutable_optimizer()->set_lr(0.1);
    spec.mutable_workers()->set_min(1);
    spec.mutable_workers()->set_max(2);
    return *coordinator_.SubmitJob(spec);
  }
  std::string Register(const std::string& job) {
    v1::RegisterWorkerRequest r = testing::WorkerOn();
    r.set_job_id(job);
    return coordinator_.RegisterWorker(r)->worker_id();
  }
  absl::StatusOr<v1::DeclareModelResponse> Declare(
      const std::string& worker, const std::string& job,
      std::vector<v1::TensorSpec> tensors) {
    v1::DeclareModelRequest r;
    r.set_worker_id(worker);
    r.set_job_id(job);
    for (auto& t : tensors) *r.add_tensors() = t;
    return coordinator_.DeclareModel(r);
  }
  v1::WorkerAssignment Beat(const std::string& worker) {
    v1::WorkerHeartbeatRequest r;
    r.set_worker_id(worker);
    return coordinator_.WorkerHeartbeat(r)->assignment();
  }

  testing::FaultInjectionEnv env_;
  InlineExecutor inline_;
  testing::FakeShards shards_;
  Coordinator coordinator_;
};

// A declared model no registered shard could hold is refused at once and
// changes nothing (a 2^30-element model once made a shard allocate 2.8 GB,
// fail, and keep the memory while the job retried). Issue 40, item 2.
TEST_F(ExternalModelTest, ADeclaredModelNoShardCouldHoldIsRefused) {
  const std::string job = SubmitExternal();
  const std::string w1 = Register(job);
  v1::RegisterShardRequest shard;
  shard.set_address("127.0.0.1:1");
  shard.set_memory_bytes(1 << 20);
  ASSERT_TRUE(coordinator_.RegisterShard(shard).ok());
  auto big = Declare(w1, job, {Tensor("w", {1 << 15, 1 << 15})});
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("tensors: a shard would hold"),
            std::string::npos)
      << big.status();
  EXPECT_EQ(coordinator_.GetJob(job)->spec().model().tensors_size(), 0);
  auto fits = Declare(w1, job, {Tensor("w", {64, 64})});
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(coordinator_.GetJob(job)->spec().model().tensors_size(), 1);
}

TEST_F(ExternalModelTest, TheFirstDeclarationIsTheModelAndLaterOnesMustMatch) {
  const std::string job = SubmitExternal();
  const std::string generic = coordinator_.RegisterWorker(testing::WorkerOn())->worker_id();
  const std::string w1 = Register(job);
  v1::RegisterShardRequest shard;
  shard.set_address("127.0.0.1:1");
  ASSERT_TRUE(coordinator_.RegisterShard(shard).ok());
  coordinator_.Tick();
  EXPECT_EQ(coordinator_.GetJob(job)->state(), v1::PENDING)
      << "no tensors declared yet";
  EXPECT_EQ(Declare(generic, job, {Tensor("w", {2})}).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto bad = Declare(w1, job, {Tensor("w", {2}), Tensor("w", {3})});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("model.tensors[1].name"),
            std::string::npos);
  EXPECT_EQ(coordinator_.GetJob(job)->spec().model().tensors_size(), 0)
      << "a rejected declaration changes nothing";
  auto ok = Declare(w1, job, {Tensor("w", {4, 2}), Tensor("b", {2})});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->spec().model().tensors_size(), 2);
  coordinator_.Tick();
  env_.Advance(absl::Seconds(2));  // past the start grace (max is 2)
  coordinator_.Tick();
  v1::JobStatus status = *coordinator_.GetJob(job);
  ASSERT_EQ(status.state(), v1::RUNNING);
  ASSERT_EQ(status.workers_size(), 1) << "only the worker registered for it";
  EXPECT_EQ(status.workers(0), w1);
  ASSERT_EQ(shards_.inits.size(), 1u);
  EXPECT_EQ(shards_.inits[0].second.spec().model().tensors_size(), 2);
  EXPECT_EQ(Beat(generic).job_id(), "") << "a generic worker stays idle";
  // Rank 0 uploads the values until a shard heartbeat says they arrived.
  v1::WorkerAssignment a = Beat(w1);
  EXPECT_EQ(a.rank(), 0);
  EXPECT_TRUE(a.initialize());
  v1::ShardHeartbeatRequest sb;
  sb.set_shard_id(status.shards(0));
  v1::ShardJobStats* stats = sb.add_jobs();
  stats->set_job_id(job);
  stats->set_generation(1);
  stats->set_initialized(true);
  ASSERT_TRUE(coordinator_.ShardHeartbeat(sb).ok());
  EXPECT_FALSE(Beat(w1).initialize());
  // A second worker with another model is refused, naming the difference.
  const std::string w2 = Register(job);
  auto other = Declare(w2, job, {Tensor("w", {4, 2}), Tensor("b", {3})});
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find(
                "tensors[1] 'b' [3] differs from the job's 'b' [2]"),
            std::string::npos)
      << other.status();
  // The same shapes, but "b" a buffer where the job's is a parameter.
  v1::TensorSpec buffer = Tensor("b", {2});
  buffer.set_buffer(true);
  auto kind = Declare(w2, job, {Tensor("w", {4, 2}), buffer});
  EXPECT_EQ(kind.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(kind.status().message().find(
                "tensors[1] 'b' [2] (buffer) differs from the job's 'b' [2]"),
            std::string::npos)
      << kind.status();
  EXPECT_TRUE(Declare(w2, job, {Tensor("w", {4, 2}), Tensor("b", {2})}).ok());
}

// The last member failing (a NaN gradient) fails the job only when nobody
// else waits to train it; a worker registered for it takes over.
TEST_F(ExternalModelTest, ALastMemberThatFailsLeavesTheJobToTheNextWorker) {
  const std::string job = SubmitExternal();
  const std::string w1 = Register(job);
  v1::RegisterShardRequest shard;
  shard.set_address("127.0.0.1:1");
  ASSERT_TRUE(coordinator_.RegisterShard(shard).ok());
  ASSERT_TRUE(Declare(w1, job, {Tensor("w", {2})}).ok());
  coordinator_.Tick();
  env_.Advance(absl::Seconds(2));
  coordinator_.Tick();
  ASSERT_EQ(coordinator_.GetJob(job)->state(), v1::RUNNING);
  const std::string w2 = Register(job);
  v1::ReportProgressRequest failed;
  failed.set_job_id(job);
  failed.set_worker_id(w1);
  failed.set_error("push.data element 0 is not finite (nan)");
  ASSERT_TRUE(coordinator_.ReportProgress(failed).ok());
  v1::JobStatus status = *coordinator_.GetJob(job);
  EXPECT_EQ(status.state(), v1::RUNNING) << status.message();
  EXPECT_NE(status.message().find("the last member failed"), std::string::npos)
      << status.message();
  coordinator_.Tick();
  EXPECT_TRUE(Beat(w2).prepare()) << "w2 is offered the place";
  EXPECT_FALSE(Beat(w1).prepare()) << "not the worker that failed";
  v1::WorkerHeartbeatRequest prepared;
  prepared.set_worker_id(w2);
  prepared.set_prepared_job(job);
  ASSERT_TRUE(coordinator_.WorkerHeartbeat(prepared).ok());
  coordinator_.Tick();
  status = *coordinator_.GetJob(job);
  EXPECT_EQ(status.generation(), 2);
  ASSERT_EQ(status.workers_size(), 1);
  EXPECT_EQ(status.workers(0), w2);
  // w2 fails too, and nobody is left to take the job: it fails.
  failed.set_worker_id(w2);
  ASSERT_TRUE(coordinator_.ReportProgress(failed).ok());
  status = *coordinator_.GetJob(job);
  EXPECT_EQ(status.state(), v1::FAILED);
  EXPECT_NE(status.message().find("is not finite"), std::string::npos)
      << status.message();
}

// A worker registered for a job learns that the job ended: at once when it
// registers late, by its heartbeat when the job ends while it waits.
TEST_F(ExternalModelTest, AWorkerWaitingForAnEndedJobIsToldWhy) {
  const std::string job = SubmitExternal();
  const std::string w1 = Register(job);
  EXPECT_EQ(Beat(w1).job_id(), "") << "pending: nothing to say yet";
  ASSERT_TRUE(coordinator_.CancelJob(job).ok());
  v1::WorkerAssignment a = Beat(w1);
  EXPECT_EQ(a.job_id(), job);
  EXPECT_EQ(a.job_state(), v1::CANCELLED);
  EXPECT_EQ(a.job_message(), "cancelled by user");
  EXPECT_EQ(a.generation(), 0) << "no place in it";
  const size_t members = coordinator_.ListMembers().size();
  v1::RegisterWorkerRequest late = testing::WorkerOn();
  late.set_job_id(job);
  absl::StatusOr<v1::RegisterWorkerResponse> r =
      coordinator_.RegisterWorker(late);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("already ended (CANCELLED)"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(coordinator_.ListMembers().size(), members) << "nobody added";
}

TEST_F(ExternalModelTest, RegisteringForAnUnknownJobIsRefused) {
  v1::RegisterWorkerRequest r = testing::WorkerOn();
  r.set_job_id("job-404");
  EXPECT_EQ(coordinator_.RegisterWorker(r).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(coordinator_.ListMembers().empty());
}

// An external trainer may train a built-in model's job if it declares that
// model's very tensors (fulcrum-worker and PyTorch workers in one job).
TEST_F(ExternalModelTest, AnExternalTrainerOfABuiltInModelDeclaresItsTensors) {
  v1::JobSpec mlp;
  mlp.set_name("mlp");
  mlp.mutable_model()->set_type("mlp");
  mlp.mutable_model()->add_layers(4);
  mlp.mutable_model()->add_layers(2);
  mlp.mutable_dataset()->set_dir("/d");
  mlp.mutable_optimizer()->set_lr(0.1);
  const std::string job = *coordinator_.SubmitJob(mlp);
  const std::string w = Register(job);
  auto wrong = Declare(w, job, {Tensor("fc1.weight", {2, 5}),
                                Tensor("fc1.bias", {2})});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find(
                "tensors[0] 'fc1.weight' [2, 5] differs from the job's "
                "'fc1.weight' [2, 4]"),
            std::string::npos)
      << wrong.status();
  EXPECT_TRUE(Declare(w, job, {Tensor("fc1.weight", {2, 4}),
                               Tensor("fc1.bias", {2})})
                  .ok());
  EXPECT_EQ(coordinator_.GetJob(job)->spec().model().type(), "mlp")
      << "the job's model is unchanged";
}

}  // namespace
}  // namespace fulcrum
