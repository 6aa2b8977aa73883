#include "common/metrics/http_server.h"

#include <atomic>

#include "common/testing/http_get.h"
#include "gtest/gtest.h"

namespace fulcrum::metrics {
namespace {

TEST(HttpServerTest, ServesMetricsHealthAndReadiness) {
  Registry registry;
  registry.AddCounter("fulcrum_test_total", "T.").WithLabels().Increment(7);
  std::atomic<bool> ready{false};
  auto server = HttpServer::Start("127.0.0.1", 0, &registry,
                                  [&] { return ready.load(); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  const int port = (*server)->port();

  auto metrics = testing::HttpGet(port, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->headers.find("text/plain; version=0.0.4"),
            std::string::npos);
  EXPECT_NE(metrics->body.find("fulcrum_test_total 7\n"), std::string::npos);

  EXPECT_EQ(testing::HttpGet(port, "/healthz")->status, 200);
  EXPECT_EQ(testing::HttpGet(port, "/readyz")->status, 503);
  ready = true;
  EXPECT_EQ(testing::HttpGet(port, "/readyz")->status, 200);
  EXPECT_EQ(testing::HttpGet(port, "/nothing")->status, 404);
}

TEST(HttpServerTest, BusyPortIsAClearError) {
  Registry registry;
  auto first = HttpServer::Start("127.0.0.1", 0, &registry, nullptr);
  ASSERT_TRUE(first.ok());
  auto second =
      HttpServer::Start("127.0.0.1", (*first)->port(), &registry, nullptr);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

// --metrics_port=-1 turns the endpoint off, as the flags say (it failed
// with "Failed to setup server ports" before).
TEST(ServeProcessMetricsTest, ANegativePortMeansNoEndpoint) {
  Registry registry;
  auto server = ServeProcessMetrics("worker", "127.0.0.1", -1, "", &registry,
                                    nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(*server, nullptr);
}

}  // namespace
}  // namespace fulcrum::metrics
