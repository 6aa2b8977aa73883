#include "server/coordinator/placement.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(PlacementTest, NewJobsGoToTheLeastLoadedShardsTiesById) {
  const std::vector<ShardCandidate> shards = {
      {"s-1", "a:1", 2}, {"s-2", "a:2", 0}, {"s-3", "a:3", 1}, {"s-4", "a:4", 0}};
  EXPECT_EQ(PlaceShards(shards, 2), (std::vector<std::string>{"s-2", "s-4"}));
  EXPECT_EQ(PlaceShards(shards, 3),
            (std::vector<std::string>{"s-2", "s-4", "s-3"}));
  EXPECT_TRUE(PlaceShards(shards, 5).empty()) << "not enough shards";
}

TEST(PlacementTest, AReplacementPrefersTheRestartedProcessThenTheLeastLoaded) {
  const std::vector<ShardCandidate> shards = {
      {"s-1", "a:1", 0}, {"s-5", "a:9", 3}, {"s-6", "a:6", 1}};
  // s-5 registered at the lost shard's address: the same process restarted.
  EXPECT_EQ(ReplacementShard(shards, "a:9", {"s-1"})->id, "s-5");
  EXPECT_EQ(ReplacementShard(shards, "a:7", {"s-1"})->id, "s-6");
  EXPECT_EQ(ReplacementShard(shards, "a:7", {})->id, "s-1");
  EXPECT_FALSE(
      ReplacementShard(shards, "a:7", {"s-1", "s-5", "s-6"}).has_value());
}

// A shard takes no more bytes than it declared free (-1: no limit).
TEST(PlacementTest, OnlyShardsWithTheBytesFreeAreChosen) {
  const std::vector<ShardCandidate> shards = {{"s-1", "a:1", 0, 100},
                                              {"s-2", "a:2", 3, 5000},
                                              {"s-3", "a:3", 1, -1}};
  EXPECT_EQ(PlaceShards(shards, 2, 1000),
            (std::vector<std::string>{"s-3", "s-2"}));
  EXPECT_TRUE(PlaceShards(shards, 3, 1000).empty()) << "s-1 is too small";
  EXPECT_EQ(PlaceShards(shards, 3, 100).size(), 3u);
  EXPECT_EQ(ReplacementShard(shards, "a:1", {}, 1000)->id, "s-3")
      << "the restarted process at a:1 is too small now";
}

}  // namespace
}  // namespace fulcrum
