#include "server/ps/embedding/row_store.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

RowStoreConfig Sgd(int64_t capacity, int dim = 4) {
  RowStoreConfig c;
  c.dim = dim;
  c.init.type = RowInit::Type::kUniform;
  c.init.scale = 0.1f;
  c.init.salt = 99;
  c.optimizer.type = RowOptimizer::Type::kSgd;
  c.optimizer.lr = 0.5f;
  c.capacity = capacity;
  return c;
}

std::vector<float> ReadRow(const RowStore& s, uint64_t id) {
  std::vector<float> out(s.dim());
  s.Read(id, out.data());
  return out;
}

std::vector<float> Initial(const RowStoreConfig& c, uint64_t id) {
  std::vector<float> out(c.dim);
  InitialRow(c.init, id, c.dim, out.data());
  return out;
}

const std::vector<float> kOnes = {1, 1, 1, 1};

TEST(RowStoreTest, RowsStartFromTheirInitialValues) {
  RowStoreConfig c = Sgd(10);
  RowStore s(c);
  EXPECT_EQ(ReadRow(s, 7), Initial(c, 7));
  EXPECT_FALSE(s.Resident(7));
  EXPECT_EQ(s.Push(7, kOnes.data(), 1, 0), RowStore::Pushed::kCreated);
  std::vector<float> want = Initial(c, 7);
  for (float& v : want) v -= 0.5f;
  EXPECT_EQ(ReadRow(s, 7), want);
  EXPECT_EQ(s.Push(7, kOnes.data(), 1, 0), RowStore::Pushed::kApplied);
  for (float& v : want) v -= 0.5f;
  EXPECT_EQ(ReadRow(s, 7), want);
  EXPECT_EQ(s.stats().resident, 1);
  EXPECT_EQ(s.stats().created, 1);
}

TEST(RowStoreTest, LruEvictsTheLeastRecentlyPushedRow) {
  RowStoreConfig c = Sgd(3);
  RowStore s(c);
  for (uint64_t id : {1, 2, 3, 1}) s.Push(id, kOnes.data(), 1, 0);
  s.Push(4, kOnes.data(), 1, 0);  // evicts 2: 1 was pushed again
  EXPECT_TRUE(s.Resident(1));
  EXPECT_FALSE(s.Resident(2));
  EXPECT_TRUE(s.Resident(3));
  EXPECT_TRUE(s.Resident(4));
  EXPECT_EQ(ReadRow(s, 2), Initial(c, 2));  // back to its initial values
  std::vector<float> three = ReadRow(s, 3);
  s.Read(3, three.data());  // reads do not count as use
  s.Push(5, kOnes.data(), 1, 0);
  EXPECT_FALSE(s.Resident(3));
  RowStore::Stats st = s.stats();
  EXPECT_EQ(st.resident, 3);
  EXPECT_EQ(st.created, 5);
  EXPECT_EQ(st.evicted_capacity, 2);
  std::vector<uint64_t> order;
  s.ForEachRow([&](uint64_t id, const float*, const float*) { order.push_back(id); });
  EXPECT_EQ(order, (std::vector<uint64_t>{5, 4, 1}));
}

// A hot set pushed often survives a flood of ids seen once under lfu, and
// does not under lru.
TEST(RowStoreTest, LfuKeepsFrequentRows) {
  for (auto eviction : {RowStoreConfig::Eviction::kLfu, RowStoreConfig::Eviction::kLru}) {
    RowStoreConfig c = Sgd(100);
    c.eviction = eviction;
    RowStore s(c);
    for (uint64_t hot = 0; hot < 10; ++hot) s.Push(hot, kOnes.data(), 50, 0);
    for (uint64_t cold = 1000; cold < 3000; ++cold) s.Push(cold, kOnes.data(), 1, 0);
    int hot_left = 0;
    for (uint64_t hot = 0; hot < 10; ++hot) hot_left += s.Resident(hot);
    if (eviction == RowStoreConfig::Eviction::kLfu) {
      EXPECT_EQ(hot_left, 10);
    } else {
      EXPECT_EQ(hot_left, 0);
    }
    EXPECT_EQ(s.stats().resident, 100);
  }
}

TEST(RowStoreTest, RowsExpireAfterTtlOldestFirst) {
  RowStoreConfig c = Sgd(10);
  c.ttl_seconds = 10;
  RowStore s(c);
  s.Push(1, kOnes.data(), 1, 0);
  s.Push(2, kOnes.data(), 1, 5);
  s.Push(3, kOnes.data(), 1, 8);
  s.Push(1, kOnes.data(), 1, 9);  // 1 is young again
  EXPECT_EQ(s.Expire(14, 100), 0);
  EXPECT_EQ(s.Expire(15, 100), 1);  // 2, pushed at 5
  EXPECT_FALSE(s.Resident(2));
  EXPECT_EQ(s.Expire(100, 1), 1);  // bounded per call
  EXPECT_EQ(s.Expire(100, 100), 1);
  EXPECT_EQ(s.stats().resident, 0);
  EXPECT_EQ(s.stats().evicted_ttl, 3);
  RowStoreConfig forever = Sgd(10);
  RowStore f(forever);
  f.Push(1, kOnes.data(), 1, 0);
  EXPECT_EQ(f.Expire(int64_t{1} << 40, 100), 0);
}

TEST(RowStoreTest, MinCountAdmitsAfterEnoughPushes) {
  RowStoreConfig c = Sgd(10);
  c.min_count = 3;
  RowStore s(c);
  EXPECT_EQ(s.Push(5, kOnes.data(), 1, 0), RowStore::Pushed::kPending);
  EXPECT_EQ(s.Push(5, kOnes.data(), 1, 0), RowStore::Pushed::kPending);
  EXPECT_FALSE(s.Resident(5));
  EXPECT_EQ(ReadRow(s, 5), Initial(c, 5));
  EXPECT_EQ(s.stats().bytes, RowStore(c).stats().bytes);  // nothing stored
  EXPECT_EQ(s.Push(5, kOnes.data(), 1, 0), RowStore::Pushed::kCreated);
  std::vector<float> want = Initial(c, 5);  // only the admitting push steps
  for (float& v : want) v -= 0.5f;
  EXPECT_EQ(ReadRow(s, 5), want);
  // Three samples in one batch count three times.
  EXPECT_EQ(s.Push(6, kOnes.data(), 3, 0), RowStore::Pushed::kCreated);
  EXPECT_EQ(s.stats().pending_pushes, 2);
}

TEST(RowStoreTest, FreedSlotsAreReused) {
  RowStoreConfig c = Sgd(1000, 16);
  c.ttl_seconds = 1;
  RowStore s(c);
  for (uint64_t id = 0; id < 1000; ++id) s.Push(id, std::vector<float>(16, 1).data(), 1, 0);
  const int64_t full = s.stats().bytes;
  EXPECT_EQ(s.Expire(5, 1 << 20), 1000);
  for (uint64_t id = 5000; id < 6000; ++id) s.Push(id, std::vector<float>(16, 1).data(), 1, 6);
  EXPECT_EQ(s.stats().resident, 1000);
  // The same blocks again; only the free list is new (4 bytes a slot,
  // room for 1024).
  EXPECT_LE(s.stats().bytes, full + 4 * 1024);
}

// The goal's bound: a full table costs at most 1.5x its values plus
// optimizer state (dim 16, adagrad: 128 bytes a row).
TEST(RowStoreTest, BytesPerRowWithinOneAndAHalfOfValuesAndState) {
  for (int64_t rows : {1000, 100000, 300000}) {
    RowStoreConfig c = Sgd(rows, 16);
    c.optimizer.type = RowOptimizer::Type::kAdagrad;
    RowStore s(c);
    const std::vector<float> g(16, 0.1f);
    for (int64_t id = 0; id < rows; ++id) s.Push(id * 7919, g.data(), 1, 0);
    const RowStore::Stats st = s.stats();
    ASSERT_EQ(st.resident, rows);
    const double per_row = static_cast<double>(st.bytes) / rows;
    EXPECT_LE(per_row, 1.5 * 128) << rows << " rows";
    EXPECT_GE(per_row, 128 + 24) << rows << " rows";  // honest accounting
  }
}


// Exact checkpoint cuts (row_cuts.h). A randomised history of pushes of
// steps around a cut at 4, pushes of earlier steps arriving after later
// ones and creating rows: the cut's copy equals a store that received only
// the pushes of steps < 4, in the same order - every row's values, Adam
// state and frequency.
struct Record {
  uint32_t freq;
  std::vector<float> record;
  bool operator==(const Record& o) const {
    return freq == o.freq && record == o.record;
  }
};
std::map<uint64_t, Record> Records(RowStore& s, int64_t cut) {
  std::map<uint64_t, Record> out;
  s.ForEachRecordSince(
      false,
      [&](uint64_t id, uint32_t freq, const float* r, bool) {
        EXPECT_TRUE(out.emplace(id, Record{freq, std::vector<float>(
                                                     r, r + s.record_floats())})
                        .second)
            << "row " << id << " twice";
      },
      cut);
  return out;
}

TEST(RowStoreTest, ACutHoldsExactlyThePushesOfEarlierSteps) {
  RowStoreConfig c = Sgd(1000);
  c.optimizer.type = RowOptimizer::Type::kAdam;
  c.optimizer.lr = 0.1f;
  for (uint64_t seed : {1, 2, 3}) {
    RowStore live(c), reference(c);
    live.SetCuts(CutWindow{4, 0, 4});
    uint64_t rng = seed * 7919;
    for (int i = 0; i < 400; ++i) {
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint64_t id = (rng >> 33) % 40;
      // Steps 2..5, the earlier ones still arriving after later ones.
      const int64_t step = 2 + static_cast<int64_t>((rng >> 20) % 4);
      const float g[4] = {float(i % 7) - 3, 0.5f, float(id), -1};
      live.Push(id, g, 1 + i % 3, 0, step);
      if (step < 4) reference.Push(id, g, 1 + i % 3, 0);
    }
    EXPECT_GT(live.stats().cut_rows, 0);
    std::map<uint64_t, Record> want;
    reference.ForEachRecord([&](uint64_t id, uint32_t freq, const float* r) {
      want[id] = Record{freq, std::vector<float>(r, r + reference.record_floats())};
    });
    ASSERT_EQ(Records(live, 4), want) << "seed " << seed;
    EXPECT_EQ(live.stats().cut_rows, 0) << "the copied cut closes";
  }
}

// Rows a push after the cut created are not in it; rows such a push
// evicted, and rows ttl expired after the cut, are, as they were.
TEST(RowStoreTest, ACutKeepsEvictedAndExpiredRowsAndLeavesOutLaterOnes) {
  RowStoreConfig c = Sgd(2);
  c.ttl_seconds = 10;
  RowStore s(c);
  s.SetCuts(CutWindow{5, 0, 5});
  s.Push(1, kOnes.data(), 1, 0, 3);
  s.Push(2, kOnes.data(), 1, 0, 4);
  const std::vector<float> one = ReadRow(s, 1), two = ReadRow(s, 2);
  s.Push(3, kOnes.data(), 1, 0, 5);  // after the cut: evicts 1
  EXPECT_FALSE(s.Resident(1));
  EXPECT_EQ(s.Expire(/*now=*/11, 10), 2);  // 2 and 3 expire
  s.Push(4, kOnes.data(), 1, 12, 6);       // after the cut: a new row
  const std::map<uint64_t, Record> cut = Records(s, 5);
  ASSERT_EQ(cut.size(), 2u);
  ASSERT_TRUE(cut.count(1) && cut.count(2));
  EXPECT_EQ(std::vector<float>(cut.at(1).record.begin(),
                               cut.at(1).record.begin() + 4), one);
  EXPECT_EQ(std::vector<float>(cut.at(2).record.begin(),
                               cut.at(2).record.begin() + 4), two);
  // Copied: the live rows again (the cut closed).
  EXPECT_EQ(Records(s, -1).size(), 1u);
}

// A full save at a cut leaves the rows changed after it marked changed
// (the next differential carries them); the others unchanged.
TEST(RowStoreTest, AFullSaveAtACutLeavesLaterChangesForTheNextDifferential) {
  RowStore s(Sgd(10));
  s.SetCuts(CutWindow{2, 0, 2});
  s.Push(1, kOnes.data(), 1, 0, 1);
  s.Push(2, kOnes.data(), 1, 0, 1);
  s.Push(2, kOnes.data(), 1, 0, 2);  // after the cut
  s.ForEachRecordSince(true, [](uint64_t, uint32_t, const float*, bool) {}, 2);
  std::map<uint64_t, bool> changed;
  s.ForEachRecordSince(false, [&](uint64_t id, uint32_t, const float*,
                                  bool ch) { changed[id] = ch; });
  EXPECT_EQ(changed, (std::map<uint64_t, bool>{{1, false}, {2, true}}));
}

// Undo (sync jobs): a membership change undoes step M (its samples train
// again), and the rows forget its pushes - those that arrived before and
// after the late pushes of step M - 1, which stay. A randomised history
// ends every round with Undo(M): the store equals one that received only
// the pushes of steps < M, in the same order (values, Adam state,
// frequency, resident rows); then step M is pushed again, as the new
// generation does, and so on.
std::map<uint64_t, Record> Live(const RowStore& s) {
  std::map<uint64_t, Record> out;
  s.ForEachRecord([&](uint64_t id, uint32_t freq, const float* r) {
    out[id] = Record{freq, std::vector<float>(r, r + s.record_floats())};
  });
  return out;
}

TEST(RowStoreTest, UndoTakesBackEveryPushOfTheNewestStep) {
  RowStoreConfig c = Sgd(1000);
  c.optimizer.type = RowOptimizer::Type::kAdam;
  c.optimizer.lr = 0.1f;
  c.undoable = true;
  for (uint64_t seed : {1, 2, 3}) {
    RowStore live(c), reference(c);
    uint64_t rng = seed * 7919;
    auto next = [&] {
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      return rng >> 33;
    };
    int64_t undone = 0;
    for (int64_t m = 1; m <= 6; ++m) {
      for (int i = 0; i < 120; ++i) {
        // Step m, with step m - 1's last pushes still arriving among them.
        const uint64_t id = next() % 60;
        const int64_t step = next() % 4 == 0 ? m - 1 : m;
        const float g[4] = {float(i % 7) - 3, 0.5f, float(id), -1};
        live.Push(id, g, 1 + i % 3, 0, step);
        if (step < m) reference.Push(id, g, 1 + i % 3, 0, step);
      }
      ASSERT_GT(live.stats().undo_rows, 0);
      ASSERT_TRUE(live.Undo(m, 0));
      ASSERT_EQ(Live(live), Live(reference)) << "seed " << seed << " step " << m;
      EXPECT_EQ(live.stats().resident, reference.stats().resident);
      EXPECT_EQ(live.stats().undo_rows, 0);
      EXPECT_GT(live.stats().undone, undone);
      undone = live.stats().undone;
      // The new generation trains step m again: both stores take it.
      for (int i = 0; i < 40; ++i) {
        const uint64_t id = next() % 60;
        const float g[4] = {0.25f, float(i % 5), -0.5f, 2};
        live.Push(id, g, 1, 0, m);
        reference.Push(id, g, 1, 0, m);
      }
    }
  }
}

// With eviction by capacity and by ttl between the step's start and the
// undo: evicted rows come back as they were, rows the step created go, and
// the store holds exactly its rows at the step's start.
TEST(RowStoreTest, UndoBringsBackEvictedAndExpiredRowsAndDropsNewOnes) {
  RowStoreConfig c = Sgd(3);
  c.ttl_seconds = 10;
  c.undoable = true;
  RowStore s(c);
  s.Push(1, kOnes.data(), 1, 0, 0);
  s.Push(2, kOnes.data(), 2, 1, 0);
  s.Push(3, kOnes.data(), 1, 2, 1);
  const std::map<uint64_t, Record> before = Live(s);
  ASSERT_EQ(before.size(), 3u);
  s.Push(2, kOnes.data(), 1, 5, 2);  // step 2 updates 2,
  s.Push(4, kOnes.data(), 1, 5, 2);  // creates 4 (evicting 1),
  EXPECT_FALSE(s.Resident(1));
  EXPECT_EQ(s.Expire(/*now=*/12, 10), 1);  // 3 expires,
  s.Push(5, kOnes.data(), 1, 12, 2);       // and 5 takes its slot
  ASSERT_NE(Live(s), before);
  ASSERT_TRUE(s.Undo(2, 13));
  EXPECT_EQ(Live(s), before);
  EXPECT_EQ(s.stats().resident, 3);
  EXPECT_EQ(s.stats().undone, 5);  // 1, 2, 3 back; 4, 5 gone
  // The restored rows count as changed for the next differential save.
  std::map<uint64_t, bool> changed;
  s.ForEachRecordSince(false, [&](uint64_t id, uint32_t, const float*,
                                  bool ch) { changed[id] = ch; });
  EXPECT_EQ(changed, (std::map<uint64_t, bool>{{1, true}, {2, true}, {3, true}}));
}

// Nothing to undo when no push carried the step; an undo below the
// newest step's cut cannot be done and says so, leaving the rows; and a
// store that is not undoable keeps no images.
TEST(RowStoreTest, UndoOfAStepNoPushCarriedChangesNothing) {
  RowStoreConfig c = Sgd(10);
  c.undoable = true;
  RowStore s(c);
  s.Push(1, kOnes.data(), 1, 0, 3);
  s.Push(2, kOnes.data(), 1, 0, 4);
  const std::map<uint64_t, Record> now = Live(s);
  EXPECT_TRUE(s.Undo(5, 0));
  EXPECT_EQ(Live(s), now);
  s.Push(1, kOnes.data(), 1, 0, 5);
  s.Push(1, kOnes.data(), 1, 0, 6);
  const std::map<uint64_t, Record> six = Live(s);
  EXPECT_FALSE(s.Undo(5, 0)) << "step 5's cut closed when step 6 came";
  EXPECT_EQ(Live(s), six);

  RowStore plain(Sgd(10));
  plain.Push(1, kOnes.data(), 1, 0, 3);
  EXPECT_EQ(plain.stats().undo_rows, 0);
}

}  // namespace
}  // namespace fulcrum
