// What a scrape reads from the shard's state: the jobs it holds and the
// wait continuations that ran without a DeferredCalls scope.
#include "server/ps/shard_collector.h"

#include <string>

#include "absl/synchronization/notification.h"
#include "common/concurrency/deferred_calls.h"
#include "common/metrics/metrics.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// The value of the unlabelled series `name` in `text` (-1: none).
double Series(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

TEST(ShardCollectorTest, AScrapeCountsTheContinuationsRunWithoutAScope) {
  metrics::Registry registry;
  ShardMetrics metrics(registry);
  ParameterShard shard;
  // Exported from 0 before the first scrape.
  EXPECT_EQ(Series(registry.Expose(), "fulcrum_server_deferred_unscoped_total"),
            0);
  EXPECT_EQ(Series(registry.Expose(), "fulcrum_server_jobs"), 0);

  // (The count is the process's: other tests in it may have added some.)
  CollectShardState(shard, &metrics);
  const double before =
      Series(registry.Expose(), "fulcrum_server_deferred_unscoped_total");
  EXPECT_EQ(before, static_cast<double>(DeferredCalls::unscoped()));
  for (int i = 0; i < 2; ++i) {
    absl::Notification ran;
    DeferredCalls::Defer([&] { ran.Notify(); });  // no scope on this thread
    ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  }
  CollectShardState(shard, &metrics);
  CollectShardState(shard, &metrics);  // a second scrape adds nothing
  EXPECT_EQ(Series(registry.Expose(), "fulcrum_server_deferred_unscoped_total"),
            before + 2);
}

}  // namespace
}  // namespace fulcrum
