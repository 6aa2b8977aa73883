#include "server/ps/embedding/row_index.h"

#include <random>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

struct Keys {
  const std::vector<uint64_t>* ids;
  uint64_t operator()(uint32_t slot) const { return (*ids)[slot]; }
};

// Random inserts and erases against std::unordered_map, through growth and
// shrinking, with ids chosen to collide in the low bits.
TEST(RowIndexTest, AgreesWithAMapUnderRandomOperations) {
  std::vector<uint64_t> ids;
  RowIndex<Keys> index(Keys{&ids});
  std::unordered_map<uint64_t, uint32_t> want;
  std::vector<uint32_t> free_slots;
  std::mt19937_64 rng(7);
  for (int op = 0; op < 200000; ++op) {
    const int phase = (op / 50000) % 2;  // grow, then mostly shrink
    const uint64_t id = (rng() % 5000) << (rng() % 2 ? 32 : 0);
    const bool insert = (rng() % 100) < (phase == 0 ? 70 : 30);
    auto it = want.find(id);
    if (insert && it == want.end()) {
      uint32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
        ids[slot] = id;
      } else {
        slot = ids.size();
        ids.push_back(id);
      }
      index.Insert(id, slot);
      want[id] = slot;
    } else if (!insert) {
      EXPECT_EQ(index.Erase(id), it != want.end());
      if (it != want.end()) {
        free_slots.push_back(it->second);
        want.erase(it);
      }
    }
    if (op % 997 == 0) {
      ASSERT_EQ(index.size(), want.size());
      for (const auto& [k, slot] : want) ASSERT_EQ(index.Find(k), slot) << k;
      EXPECT_EQ(index.Find(~uint64_t{0}), index.kNone);
      // Load at most 3/4; at least 3/16 once past the first table.
      const size_t buckets = index.bytes() / 8;
      EXPECT_LE(index.size() * 4, buckets * 3);
      if (buckets > 16) EXPECT_GE(index.size() * 16, buckets * 3);
    }
  }
}

}  // namespace
}  // namespace fulcrum
