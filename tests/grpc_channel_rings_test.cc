// GrpcParameterChannel on message rings, where the thread that waits for
// parameters reads the response ring itself (grpc_channel.h): the values
// arrive through the waiting thread, a Cancel from another thread ends a
// wait asleep on a ring at once, and a shard that goes away mid-wait ends
// it with the channel's error within the reconnect bound - the receiver
// takes the ring back and nobody waits on it past its deadline.
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/tensor/layout.h"
#include "gtest/gtest.h"
#include "server/ps/testing/test_jobs.h"
#include "tests/in_process_cluster.h"
#include "worker/grpc_channel.h"

namespace fulcrum {
namespace {

// One shard holding several partitions (64 -> 8 MLP, 1 KiB partitions:
// several messages), sgd with lr 0.5.
class GrpcChannelRingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(shard_->core.InitJob(init_).ok());
  }

  ChannelOptions Options() const {
    ChannelOptions o;
    o.job_id = init_.job_id;
    o.worker_id = "w0";
    o.shard_addresses = {shard_->address};
    o.chunk_bytes = init_.spec.chunk_bytes();
    o.connect_timeout = absl::Seconds(10);
    o.reconnect_timeout = absl::Seconds(1);
    return o;
  }
  // Opens `channel`; its stream must be on the segment's rings.
  void OpenOnRings(GrpcParameterChannel& channel) {
    absl::StatusOr<int64_t> start = channel.Open();
    ASSERT_TRUE(start.ok()) << start.status();
    ASSERT_EQ(shard_->metrics->shm_streams.WithLabels({"mapped"}).Value(), 1)
        << "the loopback shard maps the segment: rings";
  }

  const JobInit init_ = testing::MultiPartitionJob({"w0"}, "sgd");
  const ParameterLayout layout_ =
      *ParameterLayout::ForMlp({64, 8}, 1, init_.spec.partition_bytes());
  std::unique_ptr<testing::ShardServer> shard_ = testing::StartShard();
  std::vector<float> params_ = std::vector<float>(layout_.total_size());
};

TEST_F(GrpcChannelRingsTest, AStepsValuesArriveThroughTheWaitingThread) {
  GrpcParameterChannel channel(Options(), &layout_, params_.data());
  ASSERT_NO_FATAL_FAILURE(OpenOnRings(channel));
  ASSERT_GT(layout_.partitions().size(), 1u);
  const std::vector<float> before = params_;
  // Zero the buffer: only arriving values can fill it again.
  std::fill(params_.begin(), params_.end(), 0.0f);
  std::vector<float> grads(layout_.total_size(), 1.0f);
  for (const Partition& p : layout_.partitions())
    channel.Push(p.id, 0, 1, grads.data(), false, {});
  std::vector<int32_t> arrived;
  bool stop = false;
  ASSERT_TRUE(channel
                  .WaitForClock(1, absl::Now() + absl::Seconds(10), &stop,
                                [&](int32_t id) { arrived.push_back(id); })
                  .ok());
  EXPECT_EQ(arrived.size(), layout_.partitions().size());
  // sgd, lr 0.5, gradient 1 from one worker: every value moved by -0.5.
  for (size_t i = 0; i < params_.size(); ++i)
    ASSERT_FLOAT_EQ(params_[i], before[i] - 0.5f) << "element " << i;
  EXPECT_TRUE(channel.Close().ok());
}

// Waits for step 1's parameters (never pushed for) while `end` runs on
// another thread 200 ms in; returns the wait's status and *waited.
absl::Status WaitWhile(GrpcParameterChannel& channel, absl::Time deadline,
                       const std::function<void()>& end,
                       absl::Duration* waited) {
  std::thread ender([&] {
    absl::SleepFor(absl::Milliseconds(200));
    end();
  });
  const absl::Time start = absl::Now();
  bool stop = false;
  const absl::Status s =
      channel.WaitForClock(1, deadline, &stop, [](int32_t) {});
  *waited = absl::Now() - start;
  ender.join();
  return s;
}

TEST_F(GrpcChannelRingsTest, CancelEndsAWaitAsleepOnARingAtOnce) {
  GrpcParameterChannel channel(Options(), &layout_, params_.data());
  ASSERT_NO_FATAL_FAILURE(OpenOnRings(channel));
  absl::Duration waited;
  const absl::Status s =
      WaitWhile(channel, absl::Now() + absl::Seconds(30),
                [&] { channel.Cancel(); }, &waited);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(waited, absl::Seconds(5)) << "the ring wait outlived Cancel";
  channel.Close().IgnoreError();
}

TEST_F(GrpcChannelRingsTest, AShardThatGoesAwayMidWaitEndsTheWait) {
  GrpcParameterChannel channel(Options(), &layout_, params_.data());
  ASSERT_NO_FATAL_FAILURE(OpenOnRings(channel));
  absl::Duration waited;
  // The shard's server goes away (its streams end, reconnects fail).
  const absl::Status s = WaitWhile(
      channel, absl::Now() + absl::Seconds(60),
      [&] { shard_->server->Shutdown(std::chrono::system_clock::now()); },
      &waited);
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
