#include "common/metrics/metrics.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum::metrics {
namespace {

TEST(MetricsTest, CounterAndGaugeExposition) {
  Registry r;
  auto& steps =
      r.AddCounter("fulcrum_test_steps_total", "Steps done.", {"job_id"});
  steps.WithLabels({"job-1"}).Increment();
  steps.WithLabels({"job-1"}).Increment(2);
  steps.WithLabels({"job-2"}).Increment(0.5);
  auto& live = r.AddGauge("fulcrum_test_live", "Live workers.");
  live.WithLabels().Set(3);
  r.AddGauge("fulcrum_test_unused", "Never set: not exposed.", {"x"});
  EXPECT_EQ(r.Expose(),
            "# HELP fulcrum_test_steps_total Steps done.\n"
            "# TYPE fulcrum_test_steps_total counter\n"
            "fulcrum_test_steps_total{job_id=\"job-1\"} 3\n"
            "fulcrum_test_steps_total{job_id=\"job-2\"} 0.5\n"
            "# HELP fulcrum_test_live Live workers.\n"
            "# TYPE fulcrum_test_live gauge\n"
            "fulcrum_test_live 3\n");
}

TEST(MetricsTest, HistogramExposition) {
  Registry r;
  auto& h = r.AddHistogram("fulcrum_test_seconds", "Durations.", {"job_id"},
                           {0.1, 1, 10});
  Histogram& child = h.WithLabels({"j"});
  for (double v : {0.05, 0.1, 0.5, 2.0, 100.0}) child.Observe(v);
  EXPECT_EQ(r.Expose(),
            "# HELP fulcrum_test_seconds Durations.\n"
            "# TYPE fulcrum_test_seconds histogram\n"
            "fulcrum_test_seconds_bucket{job_id=\"j\",le=\"0.1\"} 2\n"
            "fulcrum_test_seconds_bucket{job_id=\"j\",le=\"1\"} 3\n"
            "fulcrum_test_seconds_bucket{job_id=\"j\",le=\"10\"} 4\n"
            "fulcrum_test_seconds_bucket{job_id=\"j\",le=\"+Inf\"} 5\n"
            "fulcrum_test_seconds_sum{job_id=\"j\"} 102.65\n"
            "fulcrum_test_seconds_count{job_id=\"j\"} 5\n");
  // Unlabelled histograms have only the le label on buckets.
  Registry r2;
  r2.AddHistogram("fulcrum_x_seconds", "X.", {}, {1}).WithLabels().Observe(3);
  EXPECT_NE(r2.Expose().find("fulcrum_x_seconds_bucket{le=\"+Inf\"} 1\n"),
            std::string::npos);
  EXPECT_NE(r2.Expose().find("fulcrum_x_seconds_count 1\n"), std::string::npos);
}

TEST(MetricsTest, Escaping) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeHelp("line\\one\nline \"two\""),
            "line\\\\one\\nline \"two\"");
  Registry r;
  r.AddGauge("fulcrum_test_g", "Help with \\ and\nnewline.", {"path"})
      .WithLabels({"C:\\dir \"x\""})
      .Set(1);
  EXPECT_EQ(r.Expose(),
            "# HELP fulcrum_test_g Help with \\\\ and\\nnewline.\n"
            "# TYPE fulcrum_test_g gauge\n"
            "fulcrum_test_g{path=\"C:\\\\dir \\\"x\\\"\"} 1\n");
}

TEST(MetricsTest, FormatValue) {
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(1e21), "1e+21");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(MetricsTest, ConcurrentUpdatesGiveExactTotals) {
  Registry r;
  Counter& c = r.AddCounter("fulcrum_test_total", "C.").WithLabels();
  Histogram& h = r.AddHistogram("fulcrum_test_h", "H.", {}, {0.5}).WithLabels();
  Gauge& g = r.AddGauge("fulcrum_test_g", "G.").WithLabels();
  constexpr int kThreads = 8, kEach = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        c.Increment();
        h.Observe(t % 2 == 0 ? 0.25 : 0.75);
        g.Add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), kThreads * kEach);
  EXPECT_EQ(g.Value(), kThreads * kEach);
  EXPECT_EQ(h.Count(), uint64_t{kThreads} * kEach);
  EXPECT_EQ(h.Counts()[0], uint64_t{kThreads / 2} * kEach);
  EXPECT_DOUBLE_EQ(h.Sum(),
                   kThreads / 2 * kEach * 0.25 + kThreads / 2 * kEach * 0.75);
}

TEST(MetricsTest, CardinalityIsBounded) {
  Registry r;
  auto& f = r.AddCounter("fulcrum_test_total", "C.", {"worker"});
  for (size_t i = 0; i < FamilyBase::kMaxChildren + 50; ++i) {
    f.WithLabels({"w-" + std::to_string(i)}).Increment();
  }
  const std::string text = r.Expose();
  size_t lines = 0;
  for (char ch : text) lines += ch == '\n';
  EXPECT_EQ(lines, 2 + FamilyBase::kMaxChildren +
                       1);  // HELP, TYPE, children, overflow
  EXPECT_NE(text.find("fulcrum_test_total{worker=\"overflow\"} 50\n"),
            std::string::npos);
}

TEST(MetricsTest, ClearDropsChildren) {
  Registry r;
  auto& f = r.AddGauge("fulcrum_test_g", "G.", {"job_id"});
  f.WithLabels({"a"}).Set(1);
  f.Clear();
  EXPECT_EQ(r.Expose(), "");
  f.WithLabels({"b"}).Set(2);
  EXPECT_NE(r.Expose().find("fulcrum_test_g{job_id=\"b\"} 2\n"),
            std::string::npos);
  EXPECT_EQ(r.Expose().find("job_id=\"a\""), std::string::npos);
}

TEST(MetricsTest, CollectorsRunBeforeExposition) {
  Registry r;
  Gauge& g = r.AddGauge("fulcrum_test_g", "G.").WithLabels();
  int calls = 0;
  r.AddCollector([&] { g.Set(++calls); });
  EXPECT_NE(r.Expose().find("fulcrum_test_g 1\n"), std::string::npos);
  EXPECT_NE(r.Expose().find("fulcrum_test_g 2\n"), std::string::npos);
}

}  // namespace
}  // namespace fulcrum::metrics
