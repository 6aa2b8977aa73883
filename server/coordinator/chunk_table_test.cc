// ChunkTable: one lease at a time, or more while the earlier ones are in
// flight (a prefetching loader), and the ledger as the truth on rebuild.
#include "server/coordinator/chunk_table.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(ChunkTableTest, AskingAgainReturnsTheLeaseHeld) {
  ChunkTable t(10, 1);
  t.set_dataset_size(40);  // chunks 0..3
  EXPECT_EQ(t.Lease("a", {}).chunk().chunk(), 0);
  EXPECT_EQ(t.Lease("a", {}).chunk().chunk(), 0) << "the one it holds";
  EXPECT_EQ(t.Lease("b", {}).chunk().chunk(), 1);
  EXPECT_EQ(t.Lease("a", {0}).chunk().chunk(), 2) << "after reporting it";
}

TEST(ChunkTableTest, ChunksInFlightStayHeldAndANextOneIsLeased) {
  ChunkTable t(10, 1);
  t.set_dataset_size(60);  // chunks 0..5
  EXPECT_EQ(t.Lease("a", {}).chunk().chunk(), 0);
  EXPECT_EQ(t.Lease("a", {}, {0}).chunk().chunk(), 1);
  EXPECT_EQ(t.Lease("b", {}).chunk().chunk(), 2) << "0 and 1 stay a's";
  EXPECT_EQ(t.Lease("a", {}, {0, 1}).chunk().chunk(), 3);
  EXPECT_EQ(t.Lease("a", {}, {0, 1, 3}).chunk().chunk(), 4);
  // Four held: none more until one is trained.
  v1::LeaseChunkResponse full = t.Lease("a", {}, {0, 1, 3, 4});
  EXPECT_FALSE(full.has_chunk());
  EXPECT_FALSE(full.exhausted());
  EXPECT_EQ(t.Lease("a", {0}, {1, 3, 4}).chunk().chunk(), 5);
  // a dies: every chunk it held returns, resumed where the ledger ends.
  LedgerMap ledger;
  ledger[1].set_end(14);  // positions [10, 14) of chunk 1 are trained
  ledger[0].set_end(10);
  t.Rebuild(ledger);
  v1::LeaseChunkResponse again = t.Lease("c", {});
  EXPECT_EQ(again.chunk().chunk(), 1);
  EXPECT_EQ(again.chunk().begin(), 14);
}

// A worker that left (or lapsed and may still push) gives its chunk back
// only at the next generation, where the ledger says how far it got: handed
// out at once, it was trained again from the lease's start (an epoch of a
// cut-off coordinator's job trained 6,128 of 6,000 samples).
TEST(ChunkTableTest, AReleasedChunkWaitsForTheNextRebuild) {
  ChunkTable t(10, 1);
  t.set_dataset_size(20);  // chunks 0, 1
  EXPECT_EQ(t.Lease("a", {}).chunk().chunk(), 0);
  t.Release("a");
  EXPECT_EQ(t.Lease("b", {}).chunk().chunk(), 1);
  v1::LeaseChunkResponse none = t.Lease("b", {}, {1});
  EXPECT_FALSE(none.has_chunk()) << "chunk 0 is not leased again yet";
  EXPECT_FALSE(none.exhausted());
  LedgerMap ledger;
  ledger[0].set_end(6);  // a trained [0, 6) before it left
  t.Rebuild(ledger);
  v1::LeaseChunkResponse again = t.Lease("c", {});
  EXPECT_EQ(again.chunk().chunk(), 0);
  EXPECT_EQ(again.chunk().begin(), 6);
}

}  // namespace
}  // namespace fulcrum
