// GrpcParameterChannel::Close while a stream is re-opening: the close must
// end the new connection too. Before the fix a connection opened after the
// sender had left was never half-closed, so its receiver waited for a shard
// that waited for pushes and Close() hung (seen as exactly_once_test
// timing out on loaded machines).
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/config/job_spec.h"
#include "common/tensor/layout.h"
#include "common/testing/fault_proxy.h"
#include "gtest/gtest.h"
#include "tests/in_process_cluster.h"
#include "worker/grpc_channel.h"

namespace fulcrum {
namespace {

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("close");
  spec.mutable_model()->set_type("mlp");
  for (int n : {32, 16, 10}) spec.mutable_model()->add_layers(n);
  spec.mutable_dataset()->set_dir("/unused");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_lr(0.1);
  spec.set_shards(1);
  ApplyDefaults(&spec);
  return spec;
}

TEST(GrpcChannelCloseTest, CloseDuringReconnectEndsTheNewConnection) {
  const v1::JobSpec spec = Spec();
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  auto layout = ParameterLayout::ForMlp({32, 16, 10}, 1, spec.partition_bytes());
  ASSERT_TRUE(layout.ok());
  std::unique_ptr<testing::ShardServer> shard = testing::StartShard();
  ASSERT_TRUE(shard->core.InitJob({"job", spec, 0, 1, 1, {"w0"}}).ok());
  const int port =
      std::stoi(shard->address.substr(shard->address.find(':') + 1));
  testing::FaultProxy proxy(port, 0.0, 1);
  ASSERT_GT(proxy.port(), 0);

  // The second connection (the re-open after DropAll) waits in the
  // context hook until Close() has begun and its sender had time to leave.
  absl::Notification reconnecting, close_called;
  int connects = 0;  // only the stream's receiver thread calls the hook
  auto hook = [&](grpc::ClientContext*) {
    if (++connects != 2) return;
    reconnecting.Notify();
    close_called.WaitForNotificationWithTimeout(absl::Seconds(30));
    absl::SleepFor(absl::Milliseconds(300));
  };
  ChannelOptions o;
  o.job_id = "job";
  o.worker_id = "w0";
  o.shard_addresses = {absl::StrCat("127.0.0.1:", proxy.port())};
  o.chunk_bytes = spec.chunk_bytes();
  o.connect_timeout = absl::Seconds(60);  // Close's own bound: far above 10 s
  std::vector<float> params(layout->total_size());
  GrpcParameterChannel channel(o, &*layout, params.data(), hook);
  absl::StatusOr<int64_t> start = channel.Open();
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(*start, 0);

  proxy.DropAll();
  ASSERT_TRUE(reconnecting.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the channel did not re-open its stream after the drop";
  absl::Notification closed;
  absl::Status close_status;
  close_called.Notify();
  std::thread closer([&] {
    close_status = channel.Close();
    closed.Notify();
  });
  const bool prompt = closed.WaitForNotificationWithTimeout(absl::Seconds(10));
  EXPECT_TRUE(prompt) << "Close() did not return within 10 s of a close that "
                         "raced the stream's re-open";
  if (!prompt) channel.Cancel();  // unblocks the old code's hang
  closer.join();
  EXPECT_TRUE(close_status.ok()) << close_status;
  EXPECT_GE(proxy.drops(), 1);
  shard->server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace fulcrum
