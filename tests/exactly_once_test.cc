// No lost or doubled update: workers push deterministic gradients (a known
// constant per worker and step) through proxies that drop connections at
// random, so pushes and replies are lost mid-stream and streams re-open
// and re-send. The final parameters must equal the exactly computed
// expected value: every gradient applied once, none lost, none twice.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/config/job_spec.h"
#include "common/tensor/layout.h"
#include "gtest/gtest.h"
#include "server/ps/optimizer.h"
#include "common/testing/fault_proxy.h"
#include "tests/in_process_cluster.h"
#include "worker/group_channel.h"
#include "worker/grpc_channel.h"

namespace fulcrum {
namespace {

// Multiples of 1/256 with small sums: the mean over 2 or 4 workers is
// exact in float, so the expected parameters are computed exactly.
float Gradient(int worker, int64_t step) {
  return static_cast<float>((worker + 1) * ((step % 7) + 1)) / 256.0f;
}

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("exact");
  spec.mutable_model()->set_type("mlp");
  for (int n : {128, 64, 10}) spec.mutable_model()->add_layers(n);
  spec.mutable_dataset()->set_dir("/unused");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_lr(1.0);
  spec.set_shards(2);
  spec.set_partition_bytes(4096);  // 9 partitions
  spec.set_chunk_bytes(1024);      // of up to 4 messages each
  ApplyDefaults(&spec);
  return spec;
}

// Payloads over TCP (kGrpc) or through shared-memory segments (kShm; every
// message then goes through the segment's rings and the gRPC stream carries
// only hello and its end, so the proxies' per-byte drops would never fire:
// a thread drops every connection of one proxy or the other each time
// worker 0 has finished 4 more steps, wherever the others are in theirs).
// kCallback / kShmCallback: the same to shards serving Stream on gRPC's
// callback API. pre_reduce: the four workers form one host group
// (wire.pre_reduce): only the leader's streams reach the shards, re-opened
// and re-sending the group's sums with every member's share.
class ExactlyOnceTest
    : public ::testing::TestWithParam<std::tuple<testing::Transport, bool>> {};

TEST_P(ExactlyOnceTest, DroppedConnectionsNeitherLoseNorDoubleAnUpdate) {
  const auto [transport, pre_reduce] = GetParam();
  const bool shared_memory = testing::SharedMemory(transport);
  const bool callback = testing::CallbackShards(transport);
  constexpr int kWorkers = 4;
  constexpr int64_t kSteps = 40;
  v1::JobSpec spec = Spec();
  spec.mutable_wire()->set_pre_reduce(pre_reduce);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  std::vector<std::string> ids;
  for (int w = 0; w < kWorkers; ++w) ids.push_back(absl::StrCat("w", w));
  auto layout = ParameterLayout::ForMlp({128, 64, 10}, spec.shards(),
                                        spec.partition_bytes());
  ASSERT_TRUE(layout.ok());
  ASSERT_GE(layout->partitions().size(), 6u);

  std::vector<std::unique_ptr<testing::ShardServer>> shards;
  std::vector<std::unique_ptr<testing::FaultProxy>> proxies;
  std::vector<std::string> via_proxy;
  for (int s = 0; s < spec.shards(); ++s) {
    shards.push_back(testing::StartShard(/*shared_memory=*/true, callback));
    JobInit init{"job", spec, s, spec.shards(), 1, ids};
    ASSERT_TRUE(shards.back()->core.InitJob(init).ok());
    const int port = std::stoi(
        shards.back()->address.substr(shards.back()->address.find(':') + 1));
    proxies.push_back(
        std::make_unique<testing::FaultProxy>(port, 0.02, 17 + s));
    ASSERT_GT(proxies.back()->port(), 0);
    via_proxy.push_back(absl::StrCat("127.0.0.1:", proxies.back()->port()));
  }

  std::vector<std::string> errors(kWorkers);
  std::vector<std::atomic<int64_t>> reconnects(kWorkers);
  std::atomic<int> finished{0};  // workers past their last step
  std::atomic<int64_t> progress{0};  // worker 0's steps done
  absl::Notification dropper_done;
  std::thread dropper([&] {
    int64_t mark = 4;
    for (int i = 0; shared_memory && finished.load() == 0;) {
      if (progress.load() < mark) {
        absl::SleepFor(absl::Microseconds(200));
        continue;
      }
      proxies[i++ % proxies.size()]->DropAll();
      mark += 4;
    }
    dropper_done.Notify();
  });
  GrpcChannelFactory factory(shared_memory);
  const std::string group_nonce =
      absl::StrCat("exactly-once-", getpid(), "-", absl::ToUnixNanos(absl::Now()));
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      const int64_t total = layout->total_size();
      std::vector<float> params(total), grads(total);
      ChannelOptions o;
      o.job_id = "job";
      o.worker_id = ids[w];
      o.shard_addresses = via_proxy;
      o.chunk_bytes = spec.chunk_bytes();
      o.shared_memory = shared_memory;
      o.on_reconnect = [&reconnects, w] { ++reconnects[w]; };
      if (pre_reduce) {  // one host: every worker in one group, w0 leading
        for (const std::string& id : ids) o.host_group.push_back({id, {}});
        o.group_nonce = group_nonce;
      }
      const std::unique_ptr<ParameterChannel> channel =
          MakeGroupChannel(o, &*layout, params.data(), &factory);
      ParameterChannel& client = *channel;
      absl::StatusOr<int64_t> start = client.Open();
      if (!start.ok()) {
        errors[w] = start.status().ToString();
        ++finished;
        return;
      }
      for (int64_t step = *start; step < kSteps; ++step) {
        std::fill(grads.begin(), grads.end(), Gradient(w, step));
        for (int id = static_cast<int>(layout->partitions().size()) - 1;
             id >= 0; --id) {
          client.Push(id, step, 1, grads.data(), false, {});
        }
        bool stop = false;
        absl::Status s = client.WaitForClock(
            step + 1, absl::Now() + absl::Seconds(60), &stop, [](int32_t) {});
        if (!s.ok()) {
          errors[w] = absl::StrCat("step ", step, ": ", s.ToString());
          ++finished;
          return;
        }
        if (w == 0) progress = step + 1;
      }
      ++finished;
      // Let the streams close cleanly: no drop from here on.
      dropper_done.WaitForNotificationWithTimeout(absl::Seconds(10));
      for (auto& p : proxies) p->Calm();
      absl::Status closed = client.Close();
      if (!closed.ok()) errors[w] = "close: " + closed.ToString();
    });
  }
  for (std::thread& t : threads) t.join();
  ++finished;  // (every worker may have failed before its last step)
  dropper.join();
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(errors[w], "") << "worker " << w;

  // The faults happened: connections were dropped and streams re-opened.
  int64_t drops = 0, total_reconnects = 0;
  for (auto& p : proxies) drops += p->drops();
  for (const auto& r : reconnects) total_reconnects += r.load();
  EXPECT_GE(drops, 5) << "the proxies dropped too little to test anything";
  EXPECT_GE(total_reconnects, 5);
  // The transport is the one asked for: streams mapped their segments
  // (re-opened ones offer a new segment each).
  int64_t mapped = 0, group_members = 0;
  for (auto& s : shards) {
    mapped += static_cast<int64_t>(
        s->metrics->shm_streams.WithLabels({"mapped"}).Value());
    group_members += static_cast<int64_t>(
        s->metrics->group_members.WithLabels().Value());
  }
  // (In a group only the leader has streams: one per shard.)
  const int64_t streams = pre_reduce ? spec.shards() : kWorkers * spec.shards();
  if (shared_memory) {
    EXPECT_GE(mapped, streams) << "not every stream used shared memory";
  } else {
    EXPECT_EQ(mapped, 0);
  }
  // The group formed (every member joined; each re-opened stream names
  // them again), or no stream named one.
  if (pre_reduce) {
    EXPECT_GE(group_members, (kWorkers - 1) * spec.shards());
  } else {
    EXPECT_EQ(group_members, 0);
  }

  // Expected: w_T = w_0 - sum_t mean_w g(w, t), with the shard's own float
  // operations (SGD, lr 1) applied in the same order.
  std::vector<float> expected(layout->total_size());
  InitializeParameters(*layout, spec.seed(), 0, layout->total_size(),
                       expected.data());
  const OptimizerConfig sgd = OptimizerConfig::FromSpec(spec.optimizer());
  std::vector<float> mean(expected.size()), state(expected.size());
  for (int64_t step = 0; step < kSteps; ++step) {
    float sum = 0;
    for (int w = 0; w < kWorkers; ++w) sum += Gradient(w, step);
    std::fill(mean.begin(), mean.end(), sum * (1.0f / kWorkers));
    ApplyUpdate(sgd, step, step, mean.data(), expected.data(), state.data(),
                static_cast<int64_t>(expected.size()));
  }
  // Read the shards directly (not through the proxies).
  for (int s = 0; s < spec.shards(); ++s) {
    auto job = shards[s]->core.Find("job");
    ASSERT_TRUE(job.ok());
    for (int32_t id : (*job)->partition_ids()) {
      const Partition& p = layout->partitions()[id];
      std::vector<float> got(p.size);
      int64_t version;
      bool stop;
      ASSERT_TRUE((*job)->Read(id, 0, p.size, got.data(), &version, &stop).ok());
      EXPECT_EQ(version, kSteps) << "partition " << id;
      for (int64_t i = 0; i < p.size; ++i) {
        ASSERT_EQ(got[i], expected[p.offset + i])
            << "partition " << id << " element " << i;
      }
    }
  }
  for (auto& s : shards) s->server->Shutdown(std::chrono::system_clock::now());
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ExactlyOnceTest,
    ::testing::Combine(::testing::Values(testing::Transport::kGrpc,
                                         testing::Transport::kShm,
                                         testing::Transport::kCallback,
                                         testing::Transport::kShmCallback),
                       ::testing::Bool()),
    [](const auto& info) {
      return absl::StrCat(testing::TransportName(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "_pre_reduce" : "");
    });

}  // namespace
}  // namespace fulcrum
