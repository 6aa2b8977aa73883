#include "server/ps/embedding/embedding_tables.h"
#include "server/ps/embedding/table_format.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include "common/config/job_spec.h"
#include "common/embedding/placement.h"
#include "common/testing/fault_injection_env.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

using testing::FaultInjectionEnv;

v1::JobSpec Spec(int64_t capacity = 1000, int64_t ttl = 0,
                 const std::string& extra = "") {
  auto spec = ParseJobSpec(absl::StrCat(R"(
name: ctr
model: {type: external}
optimizer: {type: sgd, lr: 0.1}
shards: 2
seed: 5
chunk_bytes: 4096
embeddings:
  - {name: user, dim: 4, capacity: )", capacity, ", ttl_seconds: ", ttl, R"(,
     optimizer: {type: sgd, lr: 1.0})", extra, R"(}
)"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  return *spec;
}

// Ids held by shard `shard` of 2.
std::vector<uint64_t> IdsOf(int shard, int n, uint64_t from = 0) {
  std::vector<uint64_t> ids;
  for (uint64_t id = from; static_cast<int>(ids.size()) < n; ++id) {
    if (ShardOfRow(id, 2) == shard) ids.push_back(id);
  }
  return ids;
}

struct Push {
  std::vector<uint64_t> ids;
  std::vector<float> g;
  RowsPush rows;
  Push(std::vector<uint64_t> i, float value, int64_t step, int chunk = 0,
       int chunks = 1, int64_t generation = 1)
      : ids(std::move(i)), g(ids.size() * 4, value) {
    rows.table = "user";
    rows.generation = generation;
    rows.step = step;
    rows.chunk = chunk;
    rows.chunks = chunks;
    rows.ids = ids;
    rows.gradients = reinterpret_cast<const char*>(g.data());
    rows.gradient_bytes = g.size() * sizeof(float);
  }
};

std::vector<float> PullOne(const EmbeddingTables& t, uint64_t id) {
  std::vector<float> out;
  EXPECT_TRUE(t.Pull("user", {&id, 1}, &out).ok());
  return out;
}

TEST(EmbeddingTablesTest, PushThenPull) {
  FaultInjectionEnv env;
  EmbeddingTables tables(Spec(), 0, 2, &env);
  const std::vector<uint64_t> ids = IdsOf(0, 3);
  std::vector<float> before;
  ASSERT_TRUE(tables.Pull("user", ids, &before).ok());
  ASSERT_EQ(before.size(), 12u);
  Push p(ids, 0.25f, 0);
  auto r = tables.Push("w1", p.rows);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied, 3);
  EXPECT_FALSE(r->repeat);
  std::vector<float> after;
  ASSERT_TRUE(tables.Pull("user", ids, &after).ok());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 0.25f);
  EXPECT_EQ(tables.Find("user")->stats().resident, 3);
}

TEST(EmbeddingTablesTest, BadRequestsNameTheFieldAndChangeNothing) {
  FaultInjectionEnv env;
  EmbeddingTables tables(Spec(), 0, 2, &env);
  const std::vector<uint64_t> mine = IdsOf(0, 2);
  const std::vector<uint64_t> theirs = IdsOf(1, 1);
  std::vector<float> out;
  EXPECT_EQ(tables.Pull("item", mine, &out).code(), absl::StatusCode::kNotFound);
  absl::Status s = tables.Pull("user", theirs, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ids[0] = "), std::string::npos) << s;
  EXPECT_NE(s.message().find("is held by shard 1, not shard 0"), std::string::npos);
  // 4096 bytes of chunk_bytes hold 256 rows of dim 4.
  s = tables.Pull("user", IdsOf(0, 257), &out);
  EXPECT_NE(s.message().find("more than chunk_bytes (4096)"), std::string::npos) << s;
  EXPECT_TRUE(tables.Pull("user", IdsOf(0, 256), &out).ok());

  auto expect_bad = [&](Push p, const std::string& field) {
    auto r = tables.Push("w1", p.rows);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind(field, 0), 0u) << r.status();
  };
  {
    Push p(mine, 1.0f, 0);
    p.rows.gradient_bytes -= 4;
    expect_bad(p, "gradients: 28 bytes, want 32");
  }
  {
    Push p({mine[0], mine[1], mine[0]}, 1.0f, 0);
    expect_bad(p, "ids[2] = ");
  }
  {
    Push p(mine, 1.0f, 0);
    p.g[5] = std::nanf("");
    expect_bad(p, "gradients[5] (row 1");
  }
  {
    Push p(mine, 1.0f, 0);
    std::vector<uint32_t> counts = {1};
    p.rows.counts = counts;
    expect_bad(p, "counts: 1 entries for 2 ids");
  }
  expect_bad(Push(mine, 1.0f, -1), "step must be >= 0");
  expect_bad(Push(mine, 1.0f, 0, 0, 65), "chunks must be in [1, 64]");
  expect_bad(Push(mine, 1.0f, 0, 2, 2), "chunk must be in [0, chunks)");
  expect_bad(Push(theirs, 1.0f, 0), "ids[0] = ");
  Push unknown(mine, 1.0f, 0);
  unknown.rows.table = "item";
  EXPECT_EQ(tables.Push("w1", unknown.rows).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(tables.Find("user")->stats().created, 0);
  // None of them was logged: the good push of step 0 still applies.
  auto r = tables.Push("w1", Push(mine, 1.0f, 0).rows);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->repeat);
  EXPECT_EQ(r->applied, 2);
}

TEST(EmbeddingTablesTest, RepeatsAreAcknowledgedNotApplied) {
  FaultInjectionEnv env;
  EmbeddingTables tables(Spec(), 0, 2, &env);
  const std::vector<uint64_t> ids = IdsOf(0, 4);
  const uint64_t id = ids[0];
  const std::vector<float> start = PullOne(tables, id);
  auto push = [&](const std::string& worker, int64_t step, int chunk,
                  int64_t generation = 1) {
    Push p({id}, 1.0f, step, chunk, 2, generation);
    auto r = tables.Push(worker, p.rows);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && !r->repeat;
  };
  EXPECT_TRUE(push("w1", 3, 0));
  EXPECT_FALSE(push("w1", 3, 0));  // the same chunk again
  EXPECT_TRUE(push("w1", 3, 1));
  EXPECT_TRUE(push("w2", 3, 0));   // another worker
  EXPECT_TRUE(push("w1", 4, 0));
  EXPECT_FALSE(push("w1", 3, 1));  // an older step: applied before
  EXPECT_TRUE(push("w1", 2, 0, 2));  // a new generation restarts the steps
  EXPECT_FALSE(push("w1", 2, 0, 2));
  EXPECT_FLOAT_EQ(PullOne(tables, id)[0], start[0] - 5.0f);
}

TEST(EmbeddingTablesTest, RowsExpireByTheEnvsClock) {
  FaultInjectionEnv env;
  EmbeddingTables tables(Spec(1000, 60), 0, 2, &env);
  const std::vector<uint64_t> ids = IdsOf(0, 10);
  ASSERT_TRUE(tables.Push("w1", Push(ids, 1.0f, 0).rows).ok());
  EmbeddingTable& t = *tables.Find("user");
  EXPECT_EQ(t.stats().resident, 10);
  env.Advance(absl::Seconds(59));
  EXPECT_EQ(t.Expire(), 0);
  env.Advance(absl::Seconds(1));
  // A push expires the old rows it passes (here: all ten).
  ASSERT_TRUE(tables.Push("w1", Push(IdsOf(0, 1, 1000), 1.0f, 1).rows).ok());
  EXPECT_EQ(t.stats().evicted_ttl, 10);
  EXPECT_EQ(t.stats().resident, 1);
  EXPECT_EQ(PullOne(tables, ids[0]), [&] {
    EmbeddingTables fresh(Spec(), 0, 2, &env);
    return PullOne(fresh, ids[0]);
  }());  // back to its initial values
}

// Threads pushing disjoint rows and pulling at once: every row ends where
// its own pushes put it; resident rows stay within capacity.
TEST(EmbeddingTablesTest, ConcurrentPushesAndPulls) {
  FaultInjectionEnv env;
  constexpr int kThreads = 4, kSteps = 50, kRows = 64;
  EmbeddingTables tables(Spec(20000), 0, 2, &env);
  std::vector<std::vector<uint64_t>> ids(kThreads);
  for (int w = 0; w < kThreads; ++w) ids[w] = IdsOf(0, kRows, 1000000 * (w + 1));
  std::vector<std::vector<float>> start(kThreads);
  for (int w = 0; w < kThreads; ++w) ASSERT_TRUE(tables.Pull("user", ids[w], &start[w]).ok());
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int step = 0; step < kSteps; ++step) {
        EXPECT_TRUE(tables.Push(absl::StrCat("w", w), Push(ids[w], 0.5f, step).rows).ok());
        std::vector<float> out;
        EXPECT_TRUE(tables.Pull("user", ids[(w + 1) % kThreads], &out).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kThreads; ++w) {
    std::vector<float> end;
    ASSERT_TRUE(tables.Pull("user", ids[w], &end).ok());
    for (size_t i = 0; i < end.size(); ++i) {
      float want = start[w][i];
      for (int step = 0; step < kSteps; ++step) want -= 0.5f;
      ASSERT_EQ(end[i], want) << w << " " << i;
    }
  }
  EXPECT_EQ(tables.Find("user")->stats().resident, kThreads * kRows);
}

// A table with staleness 1: a pull for step c waits until every member's
// pushes of the steps before c - 1 are all in (every chunk), and a new
// generation ends the wait.
TEST(EmbeddingTablesTest, StalenessBoundsReads) {
  FaultInjectionEnv env;
  EmbeddingTables tables(Spec(1000, 0, ", staleness: 1"), 0, 2, &env,
                         /*members=*/2, /*generation=*/1);
  const std::vector<uint64_t> ids = IdsOf(0, 3);
  std::vector<float> out;
  auto pull = [&](int member, int64_t step, int64_t generation = 1) {
    RowsRead r;
    r.member = member;
    r.step = step;
    r.generation = generation;
    r.deadline = absl::Now() + absl::Milliseconds(50);
    return tables.Pull("user", ids, &out, r);
  };
  auto push = [&](int member, int64_t step, int chunk, int chunks) {
    Push p(chunk == 0 ? ids : std::vector<uint64_t>{}, 0.1f, step, chunk, chunks);
    ASSERT_TRUE(tables.Push(absl::StrCat("w", member), p.rows, member).ok());
  };
  EXPECT_TRUE(pull(0, 0).ok());
  EXPECT_TRUE(pull(0, 1).ok());  // clocks 0 >= 1 - 1
  EXPECT_EQ(pull(0, 2).code(), absl::StatusCode::kDeadlineExceeded);
  push(0, 0, 0, 1);
  EXPECT_EQ(pull(0, 2).code(), absl::StatusCode::kDeadlineExceeded);  // w1: 0
  push(1, 0, 0, 2);  // half of member 1's step 0
  EXPECT_EQ(pull(0, 2).code(), absl::StatusCode::kDeadlineExceeded);
  push(1, 0, 1, 2);  // the other half: its clock is 1
  EXPECT_TRUE(pull(0, 2).ok());
  EXPECT_TRUE(pull(0, -1).ok());  // evaluation never waits
  EXPECT_EQ(pull(1, 3).code(), absl::StatusCode::kDeadlineExceeded);
  tables.ResetClocks(2, 5, 2);  // a new generation at step 5
  EXPECT_EQ(pull(1, 3).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(pull(1, 6, 2).ok());
  // A table without a bound never waits.
  EmbeddingTables unbounded(Spec(), 0, 2, &env, 2, 1);
  RowsRead far;
  far.step = 1000;
  far.deadline = absl::Now();
  EXPECT_TRUE(unbounded.Pull("user", ids, &out, far).ok());
}

// Save and Decode: every row with its optimizer state back in another
// table of the same spec; a blob of another table or shape, or a missing
// table, is refused.
TEST(EmbeddingTablesTest, SavedRowsRestoreIntoATableOfTheSameSpec) {
  FaultInjectionEnv env;
  EmbeddingTables a(Spec(), 0, 2, &env);
  const std::vector<uint64_t> ids = IdsOf(0, 50);
  ASSERT_TRUE(a.Push("w", Push(ids, 0.5f, 0).rows, /*member=*/0).ok());
  ASSERT_TRUE(a.Push("w", Push({ids[3]}, 0.5f, 1).rows, /*member=*/0).ok());
  const auto blobs = a.Save(2).blobs;  // after steps 0 and 1
  ASSERT_EQ(blobs.size(), 1u);
  EXPECT_EQ(blobs[0].first, -1);
  EmbeddingTables b(Spec(), 0, 2, &env);
  auto rows = b.Decode(blobs);
  ASSERT_TRUE(rows.ok()) << rows.status();
  b.Restore(*rows, 2);
  std::vector<float> want, got;
  ASSERT_TRUE(a.Pull("user", ids, &want).ok());
  ASSERT_TRUE(b.Pull("user", ids, &got).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(b.Find("user")->stats().resident, 50);
  // The same next step on both: the same rows.
  ASSERT_TRUE(a.Push("w", Push(ids, 0.25f, 2).rows, /*member=*/0).ok());
  ASSERT_TRUE(b.Push("w", Push(ids, 0.25f, 2).rows, /*member=*/0).ok());
  ASSERT_TRUE(a.Pull("user", ids, &want).ok());
  ASSERT_TRUE(b.Pull("user", ids, &got).ok());
  EXPECT_EQ(got, want);

  v1::JobSpec wider = Spec();
  wider.mutable_embeddings(0)->set_dim(8);
  EmbeddingTables other(wider, 0, 2, &env);
  EXPECT_EQ(other.Decode(blobs).status().code(), absl::StatusCode::kInvalidArgument);
  auto cut = blobs;
  cut[0].second.resize(cut[0].second.size() - 1);
  EXPECT_EQ(b.Decode(cut).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(b.Decode({}).status().code(), absl::StatusCode::kDataLoss);
}

// Differential saves (checkpoint.full_every): only the rows pushed since
// the last full save carry their records, every resident id its frequency;
// made whole with that save they restore every row and its state exactly,
// evictions included; without it, DATA_LOSS naming its step.
TEST(EmbeddingTablesTest, DifferentialSavesHoldTheChangedRowsAndRestoreExactly) {
  FaultInjectionEnv env;
  v1::JobSpec spec = Spec(/*capacity=*/60);  // 30 rows a shard
  spec.mutable_checkpoint()->set_full_every(3);
  EmbeddingTables a(spec, 0, 2, &env);
  const std::vector<uint64_t> ids = IdsOf(0, 28);
  ASSERT_TRUE(a.Push("w", Push(ids, 0.5f, 0).rows, /*member=*/0).ok());
  const EmbeddingTables::Saved full = a.Save(1);
  EXPECT_EQ(full.base, 1);
  a.Written(1, true);
  // Three rows pushed again, four new ones (the table evicts to make room).
  ASSERT_TRUE(a.Push("w", Push({ids[1], ids[2], ids[3]}, 0.25f, 1).rows, /*member=*/0).ok());
  const std::vector<uint64_t> fresh = IdsOf(0, 4, 1000000);
  ASSERT_TRUE(a.Push("w", Push(fresh, 1.0f, 2).rows, /*member=*/0).ok());
  const int64_t resident = a.Find("user")->stats().resident;
  ASSERT_LT(resident, 32) << "the test needs evictions";
  const EmbeddingTables::Saved diff = a.Save(3);
  EXPECT_EQ(diff.base, 1);
  auto decoded = a.Decode(diff.blobs);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ((*decoded)[0].base_step, 1);
  auto header = ReadTableHeader(diff.blobs[0].second);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->table, "user");
  EXPECT_EQ(header->base_step, 1);
  EXPECT_EQ(static_cast<int64_t>(header->rows), resident);
  EXPECT_EQ(ReadTableHeader(full.blobs[0].second)->base_step, -1);
  EXPECT_EQ(ReadTableHeader("FET").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(static_cast<int64_t>((*decoded)[0].ids.size()), resident);
  int with_records = 0;
  for (uint8_t h : (*decoded)[0].has_record) with_records += h;
  EXPECT_EQ(with_records, 7);  // the rows pushed since step 1's save
  // Per row 8 B id + 4 B frequency + 1 B flag, and 16 B of record (sgd,
  // dim 4) for the changed ones only: the full save had 28 rows.
  const int64_t full_bytes = full.blobs[0].second.size();
  const int64_t diff_bytes = diff.blobs[0].second.size();
  EXPECT_EQ(full_bytes - diff_bytes, 28 * 29 - (resident * 13 + 7 * 16));

  EmbeddingTables b(spec, 0, 2, &env);
  auto rows = b.Resolve(
      *b.Decode(diff.blobs),
      [&](int64_t step)
          -> absl::StatusOr<std::vector<std::pair<int32_t, std::string>>> {
        if (step == 1) return full.blobs;
        return absl::NotFoundError("no such file");
      });
  ASSERT_TRUE(rows.ok()) << rows.status();
  b.Restore(*rows, 3);
  EXPECT_EQ(b.Find("user")->stats().resident, resident);
  std::vector<uint64_t> all = ids;
  all.insert(all.end(), fresh.begin(), fresh.end());
  std::vector<float> want, got;
  const auto resident_ids = [](const EmbeddingTables& t) {
    std::vector<uint64_t> out;
    t.Find("user")->ForEachRecord(
        [&](uint64_t id, uint32_t, const float*) { out.push_back(id); });
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(resident_ids(b), resident_ids(a));
  ASSERT_TRUE(a.Pull("user", all, &want).ok());
  ASSERT_TRUE(b.Pull("user", all, &got).ok());
  EXPECT_EQ(got, want);
  // The same next push on both: the same rows (the state came back too).
  ASSERT_TRUE(a.Push("w", Push(all, 0.125f, 3).rows, /*member=*/0).ok());
  ASSERT_TRUE(b.Push("w", Push(all, 0.125f, 3).rows, /*member=*/0).ok());
  ASSERT_TRUE(a.Pull("user", all, &want).ok());
  ASSERT_TRUE(b.Pull("user", all, &got).ok());
  EXPECT_EQ(got, want);

  auto lost = b.Resolve(*b.Decode(diff.blobs), [](int64_t) {
    return absl::StatusOr<std::vector<std::pair<int32_t, std::string>>>(
        absl::NotFoundError("no such file"));
  });
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(lost.status().message().find("step 1"), std::string::npos)
      << lost.status();

  // Every third save is full; a full save that was not written makes the
  // next one full; so does a restore. (Each after the member pushed the
  // steps before it: Save waits for them.)
  const auto save = [](EmbeddingTables& t, int64_t step) {
    for (int64_t s = 0; s < step; ++s)
      EXPECT_TRUE(t.Push("w", Push({}, 0.0f, s).rows, 0).ok());
    return t.Save(step).base;
  };
  EXPECT_EQ(save(a, 4), 1);
  EXPECT_EQ(save(a, 5), 5);
  a.Written(5, false);
  EXPECT_EQ(save(a, 6), 6);
  a.Written(6, true);
  EXPECT_EQ(save(a, 7), 6);
  EXPECT_EQ(save(b, 8), 8);
}


// Every record of the table's rows (values and optimizer state), by id.
std::map<uint64_t, std::vector<float>> AllRecords(const EmbeddingTables& t) {
  std::map<uint64_t, std::vector<float>> out;
  const int n = t.Find("user")->record_floats();
  t.Find("user")->ForEachRecord([&](uint64_t id, uint32_t, const float* r) {
    out[id] = std::vector<float>(r, r + n);
  });
  return out;
}

// A two-member sync job's rows (Adam): step s pushes, for each member,
// gradients that depend on (member, step, row).
struct Step {
  int member;
  int64_t step;
};
void Apply(EmbeddingTables& t, const std::vector<uint64_t>& ids,
           const Step& s) {
  std::vector<uint64_t> some;
  for (size_t i = 0; i < ids.size(); ++i) {
    if ((i + s.step + s.member) % 3 != 0) some.push_back(ids[i]);
  }
  Push p(some, 0.0f, s.step);
  for (size_t i = 0; i < p.g.size(); ++i)
    p.g[i] = 0.01f * static_cast<float>((i * 7 + s.step * 3 + s.member) % 11) - 0.05f;
  auto r = t.Push(s.member == 0 ? "w0" : "w1", p.rows, s.member);
  ASSERT_TRUE(r.ok()) << r.status();
}

v1::JobSpec CutSpec(int64_t every) {
  v1::JobSpec spec = Spec();
  spec.mutable_embeddings(0)->mutable_optimizer()->set_type("adam");
  spec.mutable_embeddings(0)->mutable_optimizer()->set_lr(0.05);
  spec.mutable_checkpoint()->set_every_steps(every);
  return spec;
}

// Checkpoint 6 of a sync job while member 0 already pushed step 6 and
// member 1's step 5 is still in flight: Save waits for member 1's step 5,
// leaves member 0's step 6 out, and the rows it saved, restored and
// trained on from step 6, equal a run whose pushes came in step order.
TEST(EmbeddingTablesTest, RowsAreCutExactlyAtTheCheckpointsStep) {
  FaultInjectionEnv env;
  const v1::JobSpec spec = CutSpec(3);
  const std::vector<uint64_t> ids = IdsOf(0, 30);
  EmbeddingTables a(spec, 0, 2, &env, /*members=*/2);
  EmbeddingTables in_order(spec, 0, 2, &env, 2);
  for (int64_t s = 0; s < 5; ++s) {
    for (int m : {0, 1}) {
      Apply(a, ids, {m, s});
      Apply(in_order, ids, {m, s});
    }
  }
  Apply(a, ids, {0, 5});
  Apply(a, ids, {0, 6});  // ahead of the cut
  EmbeddingTables::Saved saved;
  std::thread writer([&] { saved = a.Save(6); });
  absl::SleepFor(absl::Milliseconds(50));  // Save waits for member 1
  Apply(a, ids, {1, 5});  // arrives after member 0's step 6
  writer.join();
  ASSERT_TRUE(saved.late.ok()) << saved.late;
  ASSERT_TRUE(saved.skip.ok()) << saved.skip;
  for (int m : {0, 1}) Apply(in_order, ids, {m, 5});
  EXPECT_EQ(AllRecords(in_order).size(), 30u);

  // Restored: exactly the pushes of steps < 6.
  EmbeddingTables b(spec, 0, 2, &env, 2);
  auto rows = b.Decode(saved.blobs);
  ASSERT_TRUE(rows.ok()) << rows.status();
  b.Restore(*rows, 6);
  b.ResetClocks(2, 6, 2);
  ASSERT_EQ(AllRecords(b), AllRecords(in_order));
  // Trained on from there: the same rows as the run in step order.
  in_order.ResetClocks(2, 6, 2);
  const auto train = [&](EmbeddingTables& t) {
    for (int64_t s = 6; s < 9; ++s) {
      for (int m : {0, 1}) {
        std::vector<uint64_t> some;
        for (size_t i = 0; i < ids.size(); ++i)
          if ((i + s + m) % 3 != 0) some.push_back(ids[i]);
        Push p(some, 0.02f * (s - m), s, 0, 1, /*generation=*/2);
        ASSERT_TRUE(t.Push(m == 0 ? "w0" : "w1", p.rows, m).ok());
      }
    }
  };
  train(b);
  train(in_order);
  EXPECT_EQ(AllRecords(b), AllRecords(in_order));
  EXPECT_EQ(a.Find("user")->stats().cut_rows, 0) << "the copied cut closed";
}

// A member whose rows of the steps before the cut never come: Save copies
// after rows_wait and says which member it did not wait for any longer.
TEST(EmbeddingTablesTest, SaveStopsWaitingForLateRowsAfterRowsWait) {
  FaultInjectionEnv env;
  EmbeddingTables t(CutSpec(2), 0, 2, &env, 2);
  t.set_rows_wait(absl::Milliseconds(50));
  const std::vector<uint64_t> ids = IdsOf(0, 4);
  for (int64_t s = 0; s < 2; ++s) Apply(t, ids, {0, s});
  Apply(t, ids, {1, 0});
  const EmbeddingTables::Saved saved = t.Save(2);
  EXPECT_EQ(saved.late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(saved.late.message().find("member 1"), std::string::npos)
      << saved.late;
  EXPECT_TRUE(saved.skip.ok());
  EXPECT_EQ(saved.blobs.size(), 1u);
}

// Pushes more than kMaxOpenCuts checkpoints ahead of the writer: the
// oldest cut is dropped (its images freed) and its file skipped, saying
// why; the newer ones are still exact.
TEST(EmbeddingTablesTest, CutsTooFarBehindThePushesAreDroppedAndSkipped) {
  FaultInjectionEnv env;
  EmbeddingTables t(CutSpec(1), 0, 2, &env, 1);
  const std::vector<uint64_t> ids = IdsOf(0, 4);
  for (int64_t s = 0; s <= CheckpointCuts::kMaxOpenCuts + 1; ++s)
    Apply(t, ids, {0, s});
  const EmbeddingTables::Saved first = t.Save(1);
  EXPECT_EQ(first.skip.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(first.skip.message().find("step 1"), std::string::npos)
      << first.skip;
  EXPECT_TRUE(first.blobs.empty());
  EXPECT_TRUE(t.Save(3).skip.ok());
}

}  // namespace
}  // namespace fulcrum
