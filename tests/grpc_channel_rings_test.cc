// GrpcParameterChannel on message rings, where the thread that waits for
// parameters reads the response ring itself (grpc_channel.h): the values
// arrive through the waiting thread, a Cancel from another thread ends a
// wait asleep on a ring at once, and a shard that goes away mid-wait ends
// it with the channel's error within the reconnect bound - the receiver
// takes the ring back and nobody waits on it past its deadline.
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/job_spec.h"
#include "common/tensor/layout.h"
#include "gtest/gtest.h"
#include "tests/in_process_cluster.h"
#include "worker/grpc_channel.h"

namespace fulcrum {
namespace {

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("rings");
  spec.mutable_model()->set_type("mlp");
  for (int n : {32, 16, 10}) spec.mutable_model()->add_layers(n);
  spec.mutable_dataset()->set_dir("/unused");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_lr(0.5);
  spec.set_shards(1);
  spec.set_partition_bytes(1024);  // several partitions: several messages
  ApplyDefaults(&spec);
  return spec;
}

struct Fixture {
  v1::JobSpec spec = Spec();
  ParameterLayout layout =
      *ParameterLayout::ForMlp({32, 16, 10}, 1, spec.partition_bytes());
  std::unique_ptr<testing::ShardServer> shard = testing::StartShard();
  std::vector<float> params = std::vector<float>(layout.total_size());

  ChannelOptions Options() const {
    ChannelOptions o;
    o.job_id = "job";
    o.worker_id = "w0";
    o.shard_addresses = {shard->address};
    o.chunk_bytes = spec.chunk_bytes();
    o.connect_timeout = absl::Seconds(10);
    o.reconnect_timeout = absl::Seconds(1);
    return o;
  }
  int64_t mapped() const {
    return static_cast<int64_t>(
        shard->metrics->shm_streams.WithLabels({"mapped"}).Value());
  }
};

TEST(GrpcChannelRingsTest, AStepsValuesArriveThroughTheWaitingThread) {
  Fixture f;
  ASSERT_TRUE(f.shard->core.InitJob({"job", f.spec, 0, 1, 1, {"w0"}}).ok());
  GrpcParameterChannel channel(f.Options(), &f.layout, f.params.data());
  absl::StatusOr<int64_t> start = channel.Open();
  ASSERT_TRUE(start.ok()) << start.status();
  ASSERT_EQ(f.mapped(), 1) << "the loopback shard maps the segment: rings";
  const std::vector<float> before = f.params;
  // Zero the buffer: only arriving values can fill it again.
  std::fill(f.params.begin(), f.params.end(), 0.0f);
  std::vector<float> grads(f.layout.total_size(), 1.0f);
  for (const Partition& p : f.layout.partitions())
    channel.Push(p.id, 0, 1, grads.data(), false, {});
  std::vector<int32_t> arrived;
  bool stop = false;
  ASSERT_TRUE(channel
                  .WaitForClock(1, absl::Now() + absl::Seconds(10), &stop,
                                [&](int32_t id) { arrived.push_back(id); })
                  .ok());
  EXPECT_EQ(arrived.size(), f.layout.partitions().size());
  // sgd, lr 0.5, gradient 1 from one worker: every value moved by -0.5.
  for (size_t i = 0; i < f.params.size(); ++i)
    ASSERT_FLOAT_EQ(f.params[i], before[i] - 0.5f) << "element " << i;
  EXPECT_TRUE(channel.Close().ok());
}

TEST(GrpcChannelRingsTest, CancelEndsAWaitAsleepOnARingAtOnce) {
  Fixture f;
  ASSERT_TRUE(f.shard->core.InitJob({"job", f.spec, 0, 1, 1, {"w0"}}).ok());
  GrpcParameterChannel channel(f.Options(), &f.layout, f.params.data());
  ASSERT_TRUE(channel.Open().ok());
  ASSERT_EQ(f.mapped(), 1);
  // Nothing pushed: the parameters of step 1 never come.
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    channel.Cancel();
  });
  const absl::Time start = absl::Now();
  bool stop = false;
  const absl::Status s = channel.WaitForClock(
      1, absl::Now() + absl::Seconds(30), &stop, [](int32_t) {});
  const absl::Duration waited = absl::Now() - start;
  canceller.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(waited, absl::Seconds(5)) << "the ring wait outlived Cancel";
  channel.Close().IgnoreError();
}

TEST(GrpcChannelRingsTest, AShardThatGoesAwayMidWaitEndsTheWait) {
  Fixture f;
  ASSERT_TRUE(f.shard->core.InitJob({"job", f.spec, 0, 1, 1, {"w0"}}).ok());
  GrpcParameterChannel channel(f.Options(), &f.layout, f.params.data());
  ASSERT_TRUE(channel.Open().ok());
  ASSERT_EQ(f.mapped(), 1);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    // The shard's server goes away (its streams end, reconnects fail).
    f.shard->server->Shutdown(std::chrono::system_clock::now());
  });
  const absl::Time start = absl::Now();
  bool stop = false;
  const absl::Status s = channel.WaitForClock(
      1, absl::Now() + absl::Seconds(60), &stop, [](int32_t) {});
  const absl::Duration waited = absl::Now() - start;
  stopper.join();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kDeadlineExceeded)
      << "the wait ran to its own deadline: " << s;
  // reconnect_timeout is 1 s (plus backoff and the ring's 50 ms poll).
  EXPECT_LT(waited, absl::Seconds(15)) << s;
  channel.Cancel();
  channel.Close().IgnoreError();
}

}  // namespace
}  // namespace fulcrum
