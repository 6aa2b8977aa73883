// End to end, as a user runs it: a coordinator, two shards and two workers as
// separate processes on 127.0.0.1 (ports picked by the kernel), a job
// submitted with fulcrumctl on a Fashion-MNIST subset, and `fulcrumctl status
// --json` reporting SUCCEEDED with the accuracy reached. Every wait has a
// deadline; every process is stopped and reaped.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/tensor/layout.h"
#include "common/tensor/model_file.h"
#include "common/tensor/table_file.h"
#include "common/testing/process.h"
#include "common/testing/synthetic_clicks.h"
#include "gtest/gtest.h"
#include "tests/process_cluster.h"

namespace fulcrum {
namespace {

using Cluster = testing::ProcessCluster;

constexpr char kDataset[] = "/usr/share/datasets/fashion-mnist";

std::string WriteJob(const std::string& name, const std::string& body) {
  const std::string path = testing::TestTempDir() + "/" + name;
  std::ofstream(path) << body;
  return path;
}

// Extracts "key": <number> from fulcrumctl's JSON output (proto3 JSON
// quotes 64-bit integers).
double JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return -1;
  size_t value = json.find(':', at) + 1;
  while (value < json.size() && (json[value] == ' ' || json[value] == '"'))
    ++value;
  return std::atof(json.c_str() + value);
}

TEST(EndToEndTest, TrainsFashionMnistSubsetToTargetAccuracy) {
  ASSERT_EQ(access(kDataset, R_OK), 0)
      << kDataset
      << " is missing: run tools/setup.sh (Debian package "
         "dataset-fashion-mnist)";
  Cluster cluster("train", {.shards = 2, .workers = 2});
  ASSERT_FALSE(cluster.address().empty()) << cluster.Logs();
  const std::string job = WriteJob("job.yaml", R"(
name: e2e-subset
model: {type: mlp, layers: [784, 64, 10]}
dataset: {format: idx, dir: /usr/share/datasets/fashion-mnist, train_limit: 6000, test_limit: 1000}
optimizer: {type: momentum, lr: 0.02, momentum: 0.9}
batch_size: 32
epochs: 3
workers: {min: 2, max: 2}
shards: 2
seed: 3
eval_every_steps: 50
checkpoint: {every_steps: 100, dir: )" + testing::TestTempDir() +
                                                   R"(/ckpt, keep: 2}
)");
  testing::RunResult submit = cluster.Ctl({"submit", job});
  ASSERT_EQ(submit.exit_code, 0) << cluster.Logs();
  std::string job_id = submit.out.substr(0, submit.out.find('\n'));
  ASSERT_EQ(job_id.rfind("job-", 0), 0u) << submit.out;

  testing::RunResult watch =
      cluster.Ctl({"status", job_id, "--watch"}, absl::Minutes(4));
  EXPECT_EQ(watch.exit_code, 0) << watch.out << cluster.Logs();
  EXPECT_NE(watch.out.find("final test accuracy: "), std::string::npos)
      << watch.out;

  testing::RunResult text = cluster.Ctl({"status", job_id});
  EXPECT_NE(text.out.find("membership:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" joined w-"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" finished w-"), std::string::npos) << text.out;
  testing::RunResult json = cluster.Ctl({"status", job_id, "--json"});
  ASSERT_EQ(json.exit_code, 0);
  EXPECT_NE(json.out.find("\"state\": \"SUCCEEDED\""), std::string::npos)
      << json.out;
  // 3 epochs of 6000 samples in global batches of 64 take at least 3 * 94
  // steps (a few more where one worker trains a chunk's tail alone).
  const double steps = JsonNumber(json.out, "step");
  EXPECT_GE(steps, 282) << json.out;
  EXPECT_LE(steps, 282 + 3 * 16) << json.out;
  EXPECT_GE(JsonNumber(json.out, "test_accuracy"), 0.75) << json.out;
  EXPECT_EQ(JsonNumber(json.out, "evaluated_step"), steps) << json.out;
  // Every sample trained exactly once per epoch, by the shards' ledger.
  absl::StatusOr<v1::JobStatus> status =
      cluster.StatusWithLedger(job_id, 3 * 6000);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->epochs_size(), 3) << json.out;
  for (const v1::EpochSamples& e : status->epochs()) {
    EXPECT_EQ(e.total(), 6000);
    EXPECT_EQ(e.trained(), 6000) << "epoch " << e.epoch();
  }
  // Both shards checkpointed steps 100 and 200; the coordinator knows 200 is
  // complete; only the newest 2 are kept, and they read back intact.
  // The coordinator learns that a checkpoint is complete from the shards'
  // heartbeats, which can trail the job's end as the ledger does (seen at
  // 100 right after the end with 4 test processes at once).
  int64_t checkpoint_step = status->checkpoint_step();
  for (const absl::Time until = absl::Now() + absl::Seconds(10);
       checkpoint_step < 200 && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(100));
    absl::StatusOr<v1::JobStatus> again = cluster.Status(job_id);
    if (again.ok()) checkpoint_step = again->checkpoint_step();
  }
  EXPECT_EQ(checkpoint_step, 200) << json.out;
  for (int shard : {0, 1}) {
    for (int step : {100, 200}) {
      const std::string path = testing::TestTempDir() + "/ckpt/" + job_id +
                               "/step-" + std::to_string(step) + "/shard-" +
                               std::to_string(shard) + ".ckpt";
      EXPECT_EQ(access(path.c_str(), R_OK), 0) << path;
    }
  }

  // fulcrumctl export writes the final parameters, pulled from both shards.
  const std::string model_path = testing::TestTempDir() + "/model.bin";
  testing::RunResult exported =
      cluster.Ctl({"export", job_id, "--out", model_path});
  ASSERT_EQ(exported.exit_code, 0) << exported.out << cluster.CtlLog();
  absl::StatusOr<ModelFile> model = ReadModelFile(model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->layers, (std::vector<int32_t>{784, 64, 10}));
  // The shards' version counts the final step too, which carried the stop
  // (the data ran out) and applied nothing; the job's step counts updates.
  EXPECT_EQ(model->version, steps + 1);
  auto layout = ParameterLayout::ForMlp({784, 64, 10}, 1, 1 << 22);
  ASSERT_EQ(static_cast<int64_t>(model->params.size()), layout->total_size());
  std::vector<float> init(layout->total_size());
  InitializeParameters(*layout, 3, 0, layout->total_size(), init.data());
  double moved = 0;
  for (size_t i = 0; i < init.size(); ++i) {
    ASSERT_TRUE(std::isfinite(model->params[i]));
    moved = std::max(moved, std::abs(double{model->params[i]} - init[i]));
  }
  EXPECT_GT(moved, 0.01) << "exported parameters are still the initial ones";
  EXPECT_EQ(cluster.Ctl({"export", "job-404", "--out", model_path}).exit_code,
            1);
}

// fulcrum-worker's click model over gRPC (docs/embeddings.md, "From
// fulcrum-worker"): dense parameters in sync mode, the embedding rows pulled
// and pushed through SparsePull/SparsePush, chunks leased; the test AUC is
// the job's accuracy, and every sample is trained once per epoch.
TEST(EndToEndTest, TrainsAClickModelWithEmbeddingRowsOnTheShards) {
  const std::string data = testing::TestTempDir() + "/clicks";
  ASSERT_TRUE(testing::WriteSyntheticClicks(data, 3200, 400, 7));
  Cluster cluster("clicks",
                  {.shards = 2,
                   .workers = 2,
                   .worker_flags = {"--data_root=" + testing::TestTempDir()},
                   .coordinator_flags = {"--data_root=" +
                                         testing::TestTempDir()}});
  ASSERT_FALSE(cluster.address().empty()) << cluster.Logs();
  const std::string job = WriteJob("clicks.yaml", R"(
name: e2e-clicks
model: {type: embedding_mlp, table: cats, bottom: [8], top: [16]}
dataset: {dir: )" + data + R"(}
optimizer: {type: adam, lr: 0.01}
embeddings:
  - {name: cats, dim: 4, capacity: 10000, optimizer: {type: adagrad, lr: 0.1}}
batch_size: 32
epochs: 2
workers: {min: 2, max: 2}
shards: 2
seed: 3
eval_every_steps: 1000
)");
  testing::RunResult submit = cluster.Ctl({"submit", job});
  ASSERT_EQ(submit.exit_code, 0) << submit.out << cluster.Logs();
  const std::string job_id = submit.out.substr(0, submit.out.find('\n'));
  testing::RunResult watch =
      cluster.Ctl({"status", job_id, "--watch"}, absl::Minutes(3));
  EXPECT_EQ(watch.exit_code, 0) << watch.out << cluster.Logs();
  testing::RunResult json = cluster.Ctl({"status", job_id, "--json"});
  EXPECT_NE(json.out.find("\"state\": \"SUCCEEDED\""), std::string::npos)
      << json.out << cluster.Logs();
  // The planted rule's own AUC is ~0.95; a model whose rows never learned
  // ranks at chance.
  EXPECT_GE(JsonNumber(json.out, "test_accuracy"), 0.88) << json.out;
  absl::StatusOr<v1::JobStatus> status =
      cluster.StatusWithLedger(job_id, 2 * 3200);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->epochs_size(), 2);
  for (const v1::EpochSamples& e : status->epochs())
    EXPECT_EQ(e.trained(), 3200) << "epoch " << e.epoch();

  // fulcrumctl export writes the dense model and, beside it, every row of
  // the table from both shards.
  const std::string model_path = testing::TestTempDir() + "/clicks.bin";
  testing::RunResult exported =
      cluster.Ctl({"export", job_id, "--out", model_path});
  ASSERT_EQ(exported.exit_code, 0) << exported.out << cluster.CtlLog();
  EXPECT_NE(exported.out.find("wrote table cats: "), std::string::npos)
      << exported.out;
  absl::StatusOr<std::vector<ExportedTable>> tables =
      ReadTableFile(model_path + ".tables");
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_EQ(tables->size(), 1u);
  const ExportedTable& cats = (*tables)[0];
  EXPECT_EQ(cats.name, "cats");
  EXPECT_EQ(cats.dim, 4);
  // Field 0's 50 categories and the other fields' 20 each (a few may be
  // missing from the data): ids (field + 1) << 32 | category, each once.
  EXPECT_GE(cats.ids.size(), 400u);
  EXPECT_LE(cats.ids.size(), 50u + 25 * 20);
  std::set<uint64_t> distinct(cats.ids.begin(), cats.ids.end());
  EXPECT_EQ(distinct.size(), cats.ids.size());
  for (uint64_t id : cats.ids) {
    EXPECT_GE(id >> 32, 1u);
    EXPECT_LE(id >> 32, 26u);
  }
  ASSERT_EQ(cats.values.size(), cats.ids.size() * 4);
  for (float v : cats.values) ASSERT_TRUE(std::isfinite(v));
}

TEST(EndToEndTest, CtlRejectsBadInputWithTheFieldNamed) {
  Cluster cluster("bad_input", {.shards = 1, .workers = 0});
  ASSERT_FALSE(cluster.address().empty()) << cluster.Logs();
  const std::string bad = WriteJob("bad.yaml", R"(
name: bad
model: {type: mlp, layers: [784, 10]}
dataset: {dir: /tmp}
optimizer: {type: momentum, lr: -1}
)");
  testing::RunResult r = cluster.Ctl({"submit", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(cluster.CtlLog().find("optimizer.lr must be > 0, got -1"),
            std::string::npos)
      << cluster.CtlLog();
  // Paths from the spec stay under the roots (the shards' checkpoint root
  // is the test's temp dir): '..' is refused at submit, naming the field.
  const std::string escape = WriteJob("escape.yaml", R"(
name: escape
model: {type: mlp, layers: [784, 10]}
dataset: {dir: /usr/share/datasets/fashion-mnist}
optimizer: {type: momentum, lr: 0.1}
checkpoint: {every_steps: 10, dir: ../../etc}
)");
  r = cluster.Ctl({"submit", escape});
  EXPECT_EQ(r.exit_code, 1);  // refused by the coordinator
  EXPECT_NE(cluster.CtlLog().find(
                "checkpoint.dir must not contain '..', got '../../etc'"),
            std::string::npos)
      << cluster.CtlLog();
  const std::string outside = WriteJob("outside.yaml", R"(
name: outside
model: {type: mlp, layers: [784, 10]}
dataset: {dir: /etc}
optimizer: {type: momentum, lr: 0.1}
)");
  r = cluster.Ctl({"submit", outside});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(cluster.CtlLog().find("dataset.dir '/etc' is outside "
                                  "/usr/share/datasets"),
            std::string::npos)
      << cluster.CtlLog();
  r = cluster.Ctl({"status", "job-404"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(cluster.CtlLog().find("NOT_FOUND: job_id 'job-404' not found"),
            std::string::npos)
      << cluster.CtlLog();
  r = cluster.Ctl({"list", "--json"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.find("job-"), std::string::npos)
      << "the bad job must not exist: " << r.out;
}

}  // namespace
}  // namespace fulcrum
