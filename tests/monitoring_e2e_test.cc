// Monitoring end to end, against a real Prometheus (Debian's): a local
// cluster of real processes trains a job while Prometheus scrapes every
// /metrics endpoint through file service discovery. The test checks, through
// Prometheus's HTTP query API, that steps increase, that live workers equal
// the workers started, that the accuracy gauge ends above the job's target,
// that histogram_quantile over the step-time histogram returns a number, and
// that every PromQL expression of the shipped Grafana dashboard returns data.
// It also runs `promtool check metrics` on every role's live /metrics and
// checks that the exported metric names and docs/metrics.md agree.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/testing/http_get.h"
#include "common/testing/process.h"
#include "gtest/gtest.h"
#include "tests/process_cluster.h"

namespace fulcrum {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;
using testing::HttpGet;
using testing::ProcessCluster;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPromtool[] = "/usr/bin/promtool";

absl::StatusOr<Struct> ParseJson(const std::string& text) {
  Struct out;
  auto s = google::protobuf::util::JsonStringToMessage(text, &out);
  if (!s.ok()) return absl::InvalidArgumentError(std::string(s.message()));
  return out;
}

// The result vector of an instant query (empty on any error).
ListValue Query(int port, const std::string& promql) {
  auto r = HttpGet(port, "/api/v1/query?query=" + testing::UrlEncode(promql));
  if (!r.ok() || r->status != 200) return {};
  auto json = ParseJson(r->body);
  if (!json.ok()) return {};
  return json->fields()
      .at("data")
      .struct_value()
      .fields()
      .at("result")
      .list_value();
}

// The value of the first sample of a query, or NaN.
double Scalar(int port, const std::string& promql) {
  ListValue result = Query(port, promql);
  if (result.values_size() == 0) return std::nan("");
  const auto& value =
      result.values(0).struct_value().fields().at("value").list_value();
  return std::atof(value.values(1).string_value().c_str());
}

// Polls `cond` every 250 ms until it holds or `timeout` passes.
template <typename Cond>
bool Eventually(absl::Duration timeout, Cond cond) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(250));
  }
  return cond();
}

// Metric names declared by `# TYPE` lines of an exposition.
std::set<std::string> ExportedNames(const std::string& exposition) {
  std::set<std::string> names;
  std::istringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0)
      names.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  return names;
}

// Metric names in the first column of docs/metrics.md's tables.
std::set<std::string> DocumentedNames() {
  std::set<std::string> names;
  std::ifstream in(testing::Runfile("docs/metrics.md"));
  const std::regex row(R"(^\| `(fulcrum_[a-z0-9_]+)` \|)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) names.insert(m[1]);
  }
  return names;
}

class MonitoringE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(kPrometheus, X_OK), 0)
        << kPrometheus << " missing: run tools/setup.sh";
    ASSERT_EQ(access(kPromtool, X_OK), 0)
        << kPromtool << " missing: run tools/setup.sh";
    ASSERT_EQ(access("/usr/share/datasets/fashion-mnist", R_OK), 0)
        << "dataset-fashion-mnist missing: run tools/setup.sh";
  }
};

TEST_F(MonitoringE2eTest,
       PrometheusSeesTheClusterAndEveryDashboardQueryHasData) {
  // Slowed workers keep the job running long enough to be scraped while
  // RUNNING; they stay up after it, so their final metrics can be read.
  ProcessCluster cluster("monitoring",
                         {.shards = 2,
                          .workers = 2,
                          .worker_flags = {"--inject_step_delay_ms=15"},
                          .worker_max_jobs = 0});
  ASSERT_FALSE(cluster.address().empty()) << cluster.Logs();
  const auto endpoints = cluster.MetricsEndpoints(absl::Seconds(20));
  ASSERT_EQ(endpoints.size(), 5u) << cluster.Logs();
  for (const auto& e : endpoints) {
    EXPECT_TRUE(Eventually(absl::Seconds(20),
                           [&] {
                             auto r = HttpGet(e.port, "/readyz");
                             return r.ok() && r->status == 200;
                           }))
        << e.process << " never became ready";
  }

  // Prometheus with file service discovery over every endpoint, scraping every
  // second.
  const std::string dir = cluster.dir();
  {
    std::ofstream targets(dir + "/targets.json");
    targets << "[";
    for (size_t i = 0; i < endpoints.size(); ++i) {
      targets << (i ? "," : "") << R"({"targets": ["127.0.0.1:)"
              << endpoints[i].port << R"("], "labels": {"role": ")"
              << endpoints[i].role << R"(", "process": ")"
              << endpoints[i].process << R"("}})";
    }
    targets << "]\n";
    std::ofstream(dir + "/alerts.yml")
        << testing::ReadFile(testing::Runfile("deploy/prometheus/alerts.yml"));
    std::ofstream(dir + "/prometheus.yml")
        << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
           "rule_files: [alerts.yml]\n"
           "scrape_configs:\n"
           "  - job_name: fulcrum\n"
           "    file_sd_configs: [{files: [targets.json], refresh_interval: "
           "1s}]\n";
  }
  const int prom_port = testing::PickFreePort();
  ASSERT_GT(prom_port, 0);
  testing::Process prometheus(
      {kPrometheus, "--config.file=" + dir + "/prometheus.yml",
       "--storage.tsdb.path=" + dir + "/tsdb",
       "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
      dir + "/prometheus.log");
  ASSERT_TRUE(Eventually(absl::Seconds(30), [&] {
    auto r = HttpGet(prom_port, "/-/ready");
    return r.ok() && r->status == 200;
  })) << testing::ReadFile(dir + "/prometheus.log");

  // Every target scraped before the job starts.
  ASSERT_TRUE(Eventually(absl::Seconds(60),
                         [&] { return Scalar(prom_port, "sum(up)") == 5; }))
      << "Prometheus did not scrape all 5 targets: "
      << Scalar(prom_port, "sum(up)") << "\n"
      << testing::ReadFile(dir + "/prometheus.log");

  // A job with a stated target that it ends above: 400 steps reach ~0.84.
  // It is evaluated once, at the end (an earlier evaluation meeting the
  // target would stop the job one step later, which can land just under it).
  std::ofstream(dir + "/job.yaml")
      << "name: monitored\n"
         "model: {type: mlp, layers: [784, 128, 10]}\n"
         "dataset: {format: idx, dir: /usr/share/datasets/fashion-mnist}\n"
         "optimizer: {type: momentum, lr: 0.05, momentum: 0.9}\n"
         "batch_size: 64\nepochs: 10\nworkers: {min: 2, max: 2}\nshards: "
         "2\nseed: 1\n"
         "target_accuracy: 0.80\neval_every_steps: 1000\nmax_steps: 400\n"
         "checkpoint: {every_steps: 100, dir: "
      << dir << "/checkpoints}\n"
      // fulcrum-worker's MLP reads no table: this one is on the shards for
      // the names and the dashboard's queries (its rows are tested in
      // server/ps/embedding and service_embeddings_test).
      << "embeddings: [{name: user, dim: 8, capacity: 1000, optimizer: "
         "{lr: 0.1}}]\n";
  auto submit = cluster.Ctl({"submit", dir + "/job.yaml"});
  ASSERT_EQ(submit.exit_code, 0) << cluster.Logs();
  const std::string job_id = submit.out.substr(0, submit.out.find('\n'));

  // While it runs: Prometheus sees both workers live and steps increasing.
  const std::string live =
      absl::StrCat("fulcrum_coordinator_live_workers{job_id=\"", job_id, "\"}");
  EXPECT_TRUE(Eventually(absl::Seconds(60),
                         [&] { return Scalar(prom_port, live) == 2; }))
      << "live workers never reached 2 in Prometheus\n"
      << cluster.Logs();
  const std::string steps = "sum(fulcrum_worker_steps_total)";
  double first = 0;
  EXPECT_TRUE(Eventually(absl::Seconds(30), [&] {
    first = Scalar(prom_port, steps);
    return first > 0;
  }));
  EXPECT_TRUE(Eventually(absl::Seconds(30), [&] {
    return Scalar(prom_port, steps) > first;
  })) << "steps did not increase";

  auto watch = cluster.Ctl({"status", job_id, "--watch"}, absl::Minutes(4));
  ASSERT_EQ(watch.exit_code, 0) << watch.out << cluster.Logs();
  const std::string accuracy =
      absl::StrCat("fulcrum_job_test_accuracy{job_id=\"", job_id, "\"}");
  EXPECT_TRUE(Eventually(absl::Seconds(15),
                         [&] { return Scalar(prom_port, accuracy) >= 0.80; }))
      << "accuracy gauge: " << Scalar(prom_port, accuracy);
  const double p90 = Scalar(prom_port,
                            "histogram_quantile(0.9, sum by (le) "
                            "(rate(fulcrum_worker_step_seconds_bucket[1m])))");
  EXPECT_TRUE(std::isfinite(p90) && p90 > 0) << "p90 step time: " << p90;

  // Every expression of the shipped dashboard returns data.
  auto dashboard = ParseJson(testing::ReadFile(
      testing::Runfile("deploy/grafana/dashboards/fulcrum.json")));
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  int checked = 0;
  for (const Value& panel :
       dashboard->fields().at("panels").list_value().values()) {
    const auto& fields = panel.struct_value().fields();
    for (const Value& target : fields.at("targets").list_value().values()) {
      const std::string expr = absl::StrReplaceAll(
          target.struct_value().fields().at("expr").string_value(),
          {{"$job_id", ".+"}});
      EXPECT_GT(Query(prom_port, expr).values_size(), 0)
          << "panel \"" << fields.at("title").string_value()
          << "\": no data for " << expr;
      ++checked;
    }
  }
  EXPECT_GE(checked, 27);

  // promtool lints every role's live exposition; names match the docs.
  std::set<std::string> exported;
  for (const auto& e : endpoints) {
    auto r = HttpGet(e.port, "/metrics");
    ASSERT_TRUE(r.ok() && r->status == 200)
        << e.process << ": "
        << (r.ok() ? std::to_string(r->status) : r.status().ToString()) << "\n"
        << cluster.Logs();
    const std::string file = dir + "/" + e.process + ".prom";
    std::ofstream(file) << r->body;
    auto lint = testing::RunCommand(
        {"/bin/sh", "-c",
         std::string(kPromtool) + " check metrics < " + file + " 2>&1"},
        absl::Seconds(30));
    EXPECT_EQ(lint.exit_code, 0) << e.process << ": " << lint.out;
    for (const std::string& n : ExportedNames(r->body)) exported.insert(n);
  }
  const std::set<std::string> documented = DocumentedNames();
  for (const std::string& n : exported) {
    EXPECT_TRUE(documented.count(n))
        << n << " is exported but not in docs/metrics.md";
  }
  for (const std::string& n : documented) {
    EXPECT_TRUE(exported.count(n))
        << n << " is in docs/metrics.md but not exported";
  }
  prometheus.Stop();
}

}  // namespace
}  // namespace fulcrum
