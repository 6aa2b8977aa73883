// Embedding tables in the shard's checkpoints: a checkpoint holds every
// table's rows (values, optimizer state, frequency) beside the dense
// partitions; restoring it brings them back exactly, restoring step 0
// forgets them, and a corrupt table blob fails the restore with nothing
// changed.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/embedding/placement.h"
#include "gtest/gtest.h"
#include "server/ps/checkpoint.h"
#include "server/ps/testing/test_jobs.h"

namespace fulcrum {
namespace {

using testing::Chunk;
using testing::Completed;
using testing::TestDir;
using testing::TinyJob;

std::vector<uint64_t> Ids() {
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 40; ++id) ids.push_back(id * 1000003);
  return ids;
}

std::vector<float> Rows(JobShard& job, const std::string& table) {
  std::vector<float> out;
  EXPECT_TRUE(job.PullRows("a", job.generation(), table, Ids(), &out).ok());
  return out;
}

void PushRows(JobShard& job, const std::string& table, int dim, int64_t step,
              float g, const std::string& worker = "a",
              const std::vector<uint64_t>& ids = Ids()) {
  std::vector<float> grads(ids.size() * dim, g);
  RowsPush p;
  p.table = table;
  p.generation = job.generation();
  p.step = step;
  p.ids = ids;
  p.gradients = reinterpret_cast<const char*>(grads.data());
  p.gradient_bytes = grads.size() * 4;
  auto r = job.PushRows(worker, p);
  ASSERT_TRUE(r.ok()) << r.status();
}

// Declares table `name` (capacity 1000, lr 0.1) in the job.
void AddTable(JobInit* init, const std::string& name, int dim,
              const std::string& optimizer) {
  v1::EmbeddingTableSpec* t = init->spec.add_embeddings();
  t->set_name(name);
  t->set_dim(dim);
  t->set_capacity(1000);
  t->mutable_optimizer()->set_type(optimizer);
  t->mutable_optimizer()->set_lr(0.1);
}

// The job's shard, its spec completed and checked; null (a test failure
// said why) when it is not valid.
std::unique_ptr<JobShard> CreateJob(JobInit init) {
  ApplyDefaults(&init.spec);
  if (absl::Status valid = ValidateJobSpec(init.spec); !valid.ok()) {
    ADD_FAILURE() << valid;
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<JobShard>> created = JobShard::Create(init);
  if (!created.ok()) {
    ADD_FAILURE() << created.status();
    return nullptr;
  }
  return *std::move(created);
}

TEST(EmbeddingRecoveryTest, CheckpointsCarryTheTablesRows) {
  const std::string dir = TestDir("embedding_ckpt");
  JobInit init = TinyJob({"a"});
  init.spec.mutable_checkpoint()->set_every_steps(2);
  init.spec.mutable_checkpoint()->set_dir(dir);
  for (const auto& [name, dim, opt] :
       std::vector<std::tuple<std::string, int, std::string>>{
           {"user", 4, "adam"}, {"item", 3, "adagrad"}}) {
    AddTable(&init, name, dim, opt);
  }
  const std::unique_ptr<JobShard> created = CreateJob(init);
  ASSERT_NE(created, nullptr);
  JobShard& job = *created;
  const std::vector<float> user0 = Rows(job, "user");
  auto step = [&](int64_t s) {
    PushRows(job, "user", 4, s, 0.5f + s);
    PushRows(job, "item", 3, s, -0.25f * (s + 1));
    std::vector<float> g(job.PartitionSize(0), 0.1f);
    PushChunk c = Chunk(s, g, 1);
    ASSERT_TRUE(Completed(job.Push(0, c)));
  };
  step(0);
  step(1);
  job.FlushCheckpoints();  // step 2 written, rows as they are now
  ASSERT_EQ(job.CheckpointSteps(), (std::vector<int64_t>{2}));
  const std::vector<float> user2 = Rows(job, "user"), item2 = Rows(job, "item");
  step(2);
  step(3);  // adam's and adagrad's state moved on too
  job.FlushCheckpoints();
  ASSERT_NE(Rows(job, "user"), user2);

  // Restore step 2: the rows, and their optimizer state (the next step
  // from there equals the step taken from there the first time).
  ASSERT_TRUE(job.Adopt(2, {"a"}, 2).ok());
  ASSERT_TRUE(job.Align(2, {"a"}, 2).ok());
  EXPECT_EQ(Rows(job, "user"), user2);
  EXPECT_EQ(Rows(job, "item"), item2);
  EXPECT_EQ(job.embeddings().Find("user")->stats().resident, 40);
  PushRows(job, "user", 4, 2, 2.5f);
  const std::vector<float> again = Rows(job, "user");
  ASSERT_NE(again, user2);
  ASSERT_TRUE(job.Adopt(4, {"a"}, 2).ok());  // once more
  ASSERT_TRUE(job.Align(4, {"a"}, 2).ok());
  PushRows(job, "user", 4, 2, 2.5f);
  EXPECT_EQ(Rows(job, "user"), again);

  // A corrupt table blob: DATA_LOSS naming the file, nothing changed.
  CheckpointFile file =
      *ReadCheckpoint(Env::Default(), CheckpointPath(dir, "job-1", 2, 0));
  for (auto& [key, blob] : file.partitions) {
    if (key < 0) blob.resize(blob.size() - 3);
  }
  ASSERT_TRUE(WriteCheckpoint(Env::Default(), CheckpointPath(dir, "job-1", 2, 0),
                              file)
                  .ok());
  const std::vector<float> before = Rows(job, "user");
  absl::Status s = job.Adopt(5, {"a"}, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("step-2/shard-0.ckpt"), std::string::npos) << s;
  EXPECT_EQ(Rows(job, "user"), before);

  // Step 0: every row back to its initial values.
  ASSERT_TRUE(job.Adopt(5, {"a"}, 0).ok());
  ASSERT_TRUE(job.Align(5, {"a"}, 0).ok());
  EXPECT_EQ(Rows(job, "user"), user0);
  EXPECT_EQ(job.embeddings().Find("user")->stats().resident, 0);
}

// Differential checkpoints (checkpoint.full_every): with keep 1 the newest
// file is step 4's differential, and step 2's full save stays on disk
// because it needs it (its sidecar says so); restoring step 4 brings every
// row back exactly; without step 2, the restore fails with DATA_LOSS
// naming it and changes nothing.
TEST(EmbeddingRecoveryTest, DifferentialCheckpointsRestoreThroughTheirFullSave) {
  const std::string dir = TestDir("embedding_diff_ckpt");
  JobInit init = TinyJob({"a"});
  init.spec.mutable_checkpoint()->set_every_steps(2);
  init.spec.mutable_checkpoint()->set_dir(dir);
  init.spec.mutable_checkpoint()->set_keep(1);
  init.spec.mutable_checkpoint()->set_full_every(2);
  AddTable(&init, "user", 4, "adagrad");
  const std::unique_ptr<JobShard> created = CreateJob(init);
  ASSERT_NE(created, nullptr);
  JobShard& job = *created;
  auto step = [&](int64_t s) {
    PushRows(job, "user", 4, s, 0.5f + s);
    std::vector<float> g(job.PartitionSize(0), 0.1f);
    PushChunk c = Chunk(s, g, 1);
    ASSERT_TRUE(Completed(job.Push(0, c)));
  };
  step(0);
  step(1);
  job.FlushCheckpoints();  // step 2: full
  step(2);
  step(3);
  job.FlushCheckpoints();  // step 4: a differential against step 2
  const std::vector<float> user4 = Rows(job, "user");
  EXPECT_EQ(job.CheckpointSteps(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(CheckpointNeeds(Env::Default(), dir, "job-1", 4, 0), 2);
  EXPECT_EQ(CheckpointNeeds(Env::Default(), dir, "job-1", 2, 0), -1);
  step(4);
  ASSERT_NE(Rows(job, "user"), user4);

  ASSERT_TRUE(job.Adopt(2, {"a"}, 4).ok());
  ASSERT_TRUE(job.Align(2, {"a"}, 4).ok());
  EXPECT_EQ(Rows(job, "user"), user4);
  EXPECT_EQ(job.embeddings().Find("user")->stats().resident, 40);

  ASSERT_TRUE(Env::Default()->RemoveFile(CheckpointPath(dir, "job-1", 2, 0)).ok());
  PushRows(job, "user", 4, 4, 1.0f);
  const std::vector<float> before = Rows(job, "user");
  absl::Status s = job.Adopt(3, {"a"}, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("step 2"), std::string::npos) << s;
  EXPECT_EQ(Rows(job, "user"), before);
}

// A shard that holds no dense partition (more shards than partitions) but
// holds rows checkpoints them too, once every member pushed every table
// for the steps before N (the rows' clocks), and restores them.
TEST(EmbeddingRecoveryTest, AShardWithRowsButNoPartitionCheckpointsThem) {
  const std::string dir = TestDir("rows_only_ckpt");
  JobInit init = TinyJob({"a", "b"});
  init.spec.set_shards(2);
  init.num_shards = 2;
  init.shard_index = 1;  // the tiny model's one partition is on shard 0
  init.spec.mutable_checkpoint()->set_every_steps(2);
  init.spec.mutable_checkpoint()->set_dir(dir);
  AddTable(&init, "user", 2, "adagrad");
  const std::unique_ptr<JobShard> created = CreateJob(init);
  ASSERT_NE(created, nullptr);
  JobShard& job = *created;
  ASSERT_TRUE(job.partition_ids().empty());
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; ids.size() < 10; ++id)
    if (ShardOfRow(id, 2) == 1) ids.push_back(id);
  auto push = [&](const std::string& w, int64_t step) {
    PushRows(job, "user", 2, step, 0.5f + step, w, ids);
  };
  auto rows = [&] {
    std::vector<float> out;
    EXPECT_TRUE(job.PullRows("a", job.generation(), "user", ids, &out).ok());
    return out;
  };
  push("a", 0);
  push("b", 0);
  push("a", 1);
  job.FlushCheckpoints();
  EXPECT_TRUE(job.CheckpointSteps().empty()) << "b has not finished step 1";
  push("b", 1);
  job.FlushCheckpoints();
  ASSERT_EQ(job.CheckpointSteps(), (std::vector<int64_t>{2}));
  const std::vector<float> at2 = rows();
  push("a", 2);
  push("b", 2);
  ASSERT_NE(rows(), at2);
  ASSERT_TRUE(job.Adopt(2, {"a", "b"}, 2).ok());
  ASSERT_TRUE(job.Align(2, {"a", "b"}, 2).ok());
  EXPECT_EQ(rows(), at2);
}


// A worker pushes a step's rows after its dense gradient, so the dense
// partitions may complete step 1 - and queue checkpoint 2 - before the
// rows of step 1 arrive, and the rows of step 2 may come before the writer
// copies: checkpoint 2 holds exactly the rows of steps 0 and 1.
TEST(EmbeddingRecoveryTest, CheckpointNHoldsTheRowsOfTheStepsBeforeN) {
  const std::string dir = TestDir("embedding_cut");
  JobInit init = TinyJob({"a"});
  init.spec.mutable_checkpoint()->set_every_steps(2);
  init.spec.mutable_checkpoint()->set_dir(dir);
  AddTable(&init, "user", 4, "adam");
  const std::unique_ptr<JobShard> created = CreateJob(init);
  ASSERT_NE(created, nullptr);
  JobShard& job = *created;
  const auto dense = [&](int64_t s) {
    std::vector<float> g(job.PartitionSize(0), 0.1f);
    PushChunk c = Chunk(s, g, 1);
    ASSERT_TRUE(Completed(job.Push(0, c)));
  };
  PushRows(job, "user", 4, 0, 0.5f);
  dense(0);
  dense(1);  // version 2: checkpoint 2 is queued; step 1's rows are not in
  PushRows(job, "user", 4, 1, -0.25f);
  const std::vector<float> at2 = Rows(job, "user");
  PushRows(job, "user", 4, 2, 2.0f);  // step 2's, before the copy
  job.FlushCheckpoints();
  ASSERT_EQ(job.CheckpointSteps(), (std::vector<int64_t>{2}));
  ASSERT_NE(Rows(job, "user"), at2);
  ASSERT_TRUE(job.Adopt(2, {"a"}, 2).ok());
  ASSERT_TRUE(job.Align(2, {"a"}, 2).ok());
  EXPECT_EQ(Rows(job, "user"), at2);
}

// A membership change in a sync job undoes the step not every partition
// completed, and its samples are trained again: the rows must forget what
// that step pushed - the leaving member's and the staying one's - or the
// retrained step would count twice. Both ways the step can be undone: the
// partition here never completed it (b left before its dense push), or it
// did but another shard did not (align below this shard's version).
std::map<uint64_t, std::vector<float>> Records(const JobShard& job,
                                               const std::string& table) {
  std::map<uint64_t, std::vector<float>> out;
  const EmbeddingTable* t = job.embeddings().Find(table);
  const int floats = t->record_floats();
  t->ForEachRecord([&](uint64_t id, uint32_t, const float* r) {
    out[id] = std::vector<float>(r, r + floats);
  });
  return out;
}

TEST(EmbeddingRecoveryTest, AMembershipChangeUndoesTheRowsOfTheUndoneStep) {
  for (const bool completed_here : {false, true}) {
    SCOPED_TRACE(completed_here ? "the partition here completed step 1"
                                : "step 1 incomplete here");
    JobInit init = TinyJob({"a", "b"});
    AddTable(&init, "user", 4, "adam");
    const std::unique_ptr<JobShard> created = CreateJob(init);
    ASSERT_NE(created, nullptr);
    JobShard& job = *created;
    const std::vector<uint64_t> ids = Ids();
    const std::vector<uint64_t> more = {7, 8, 9};  // rows step 1 creates
    const auto dense = [&](int member, int64_t s) {
      std::vector<float> g(job.PartitionSize(0), 0.1f * (member + 1));
      PushChunk c = Chunk(s, g, 1);
      c.generation = job.generation();
      return job.Push(member, c);
    };
    ASSERT_TRUE(dense(0, 0).ok());
    ASSERT_TRUE(Completed(dense(1, 0)));
    PushRows(job, "user", 4, 0, 0.5f, "a");
    PushRows(job, "user", 4, 0, -0.5f, "b");
    const std::vector<float> at1 = Rows(job, "user");
    const auto records_at1 = Records(job, "user");
    const int64_t resident_at1 = job.embeddings().Find("user")->stats().resident;

    ASSERT_TRUE(dense(0, 1).ok());
    if (completed_here) {
      ASSERT_TRUE(Completed(dense(1, 1)));
    }
    PushRows(job, "user", 4, 1, 2.0f, "a");
    PushRows(job, "user", 4, 1, 3.0f, "a", more);
    PushRows(job, "user", 4, 1, -1.0f, "b");
    ASSERT_NE(Rows(job, "user"), at1);

    // b is gone: the job goes on at step 1 with a alone.
    absl::StatusOr<Adopted> adopted = job.Adopt(2, {"a"}, std::nullopt);
    ASSERT_TRUE(adopted.ok()) << adopted.status();
    ASSERT_EQ(adopted->min_version, completed_here ? 2 : 1);
    ASSERT_TRUE(job.Align(2, {"a"}, 1).ok());
    EXPECT_EQ(Rows(job, "user"), at1);
    EXPECT_EQ(Records(job, "user"), records_at1) << "values and Adam state";
    EXPECT_EQ(job.embeddings().Find("user")->stats().resident, resident_at1);
    EXPECT_GT(job.embeddings().Find("user")->stats().undone, 0);

    // a trains step 1 again: its rows count once.
    PushRows(job, "user", 4, 1, 2.0f, "a");
    ASSERT_TRUE(Completed(dense(0, 1)));
    PushRows(job, "user", 4, 2, 1.0f, "a");
    EXPECT_NE(Rows(job, "user"), at1);
  }
}

}  // namespace
}  // namespace fulcrum
