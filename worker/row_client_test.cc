#include "worker/row_client.h"

#include <atomic>
#include <map>
#include <vector>

#include "common/config/job_spec.h"
#include "common/embedding/placement.h"
#include "gtest/gtest.h"
#include "server/ps/testing/local_tier.h"

namespace fulcrum {
namespace {

v1::JobSpec Spec() {
  auto spec = ParseJobSpec(R"(
name: ctr
model: {type: mlp, layers: [4, 2]}
dataset: {dir: /d}
optimizer: {type: sgd, lr: 0.1}
shards: 3
chunk_bytes: 1024
embeddings:
  - {name: user, dim: 4, capacity: 100000, optimizer: {type: sgd, lr: 1.0}}
)");
  EXPECT_TRUE(spec.ok() && ValidateJobSpec(*spec).ok());
  return *spec;
}

// Fails the first `failures` calls with UNAVAILABLE (a shard restarting),
// then passes them on; counts calls.
class Flaky : public RowChannel {
 public:
  Flaky(RowChannel* base, int failures) : base_(base), failures_(failures) {}
  void Pull(const RowPullCall& c, std::function<void(absl::Status)> done) override {
    ++calls;
    if (failures_.fetch_sub(1) > 0) return done(absl::UnavailableError("restarting"));
    base_->Pull(c, std::move(done));
  }
  void Push(const RowPushCall& c, std::function<void(absl::Status)> done) override {
    ++calls;
    max_chunks = std::max(max_chunks, c.chunks);
    if (failures_.fetch_sub(1) > 0) return done(absl::UnavailableError("restarting"));
    base_->Push(c, std::move(done));
  }
  std::atomic<int> calls{0};
  int max_chunks = 0;

 private:
  RowChannel* base_;
  std::atomic<int> failures_;
};

class RowClientTest : public ::testing::Test {
 protected:
  RowClientTest() : tier_("job-1", Spec(), {"w-1"}) {
    ChannelOptions o;
    o.worker_id = "w-1";
    o.generation = 1;
    local_ = tier_.Rows(o);
  }
  RowClient Client(RowChannel* channel, absl::Duration timeout = absl::Seconds(10)) {
    RowClient::Options o;
    o.shards = 3;
    o.chunk_bytes = 1024;  // 64 rows of dim 4 per request
    o.timeout = timeout;
    o.first_backoff = absl::Milliseconds(1);
    return RowClient(channel, o);
  }
  testing::LocalTier tier_;
  std::unique_ptr<RowChannel> local_;
};

// 500 ids over 3 shards with repeats: pulled in order, pushed once per id
// with the repeats' gradients summed, in more than one request per shard.
TEST_F(RowClientTest, SplitsSumsAndChunks) {
  ASSERT_TRUE(tier_.status().ok()) << tier_.status();
  Flaky counting(local_.get(), 0);
  RowClient client = Client(&counting);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 500; ++i) ids.push_back((i * 37) % 400);  // 100 repeat
  std::vector<float> before(ids.size() * 4);
  ASSERT_TRUE(client.Pull("user", 4, ids, before.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t j = 0; j < ids.size(); ++j) {
      if (ids[i] == ids[j]) {
        ASSERT_EQ(before[4 * i], before[4 * j]);
      }
    }
  }
  // 400 distinct rows over 3 shards, 64 per request: at least 7 requests.
  EXPECT_GE(counting.calls.load(), 7);
  std::vector<float> grads(ids.size() * 4, 0.25f);
  std::map<uint64_t, int> occurrences;
  for (uint64_t id : ids) ++occurrences[id];
  ASSERT_TRUE(client.Push("user", 4, 0, ids, grads).ok());
  EXPECT_GE(counting.max_chunks, 2);
  std::vector<float> after(ids.size() * 4);
  ASSERT_TRUE(client.Pull("user", 4, ids, after.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_FLOAT_EQ(after[4 * i], before[4 * i] - 0.25f * occurrences[ids[i]])
        << ids[i];
  }
}

// Views that disagree in size are refused before anything is sent.
TEST_F(RowClientTest, PushSummedNamesTheViewThatDisagrees) {
  ASSERT_TRUE(tier_.status().ok()) << tier_.status();
  Flaky counting(local_.get(), 0);
  RowClient client = Client(&counting);
  const std::vector<uint64_t> ids = {1, 2, 3};
  const std::vector<uint32_t> counts = {1, 2};
  const std::vector<float> grads(12, 1.0f);
  absl::Status s = client.PushSummed("user", 4, 0, ids, counts, grads);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("counts"), std::string::npos) << s;
  const std::vector<uint32_t> three = {1, 2, 1};
  s = client.PushSummed("user", 4, 0, ids, three,
                        absl::MakeConstSpan(grads).subspan(0, 8));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("gradients"), std::string::npos) << s;
  EXPECT_EQ(counting.calls.load(), 0);
  // The same views, whole, are pushed: row 2 moves by its gradient (sgd 1.0).
  float before[4], after[4];
  const uint64_t two = 2;
  ASSERT_TRUE(client.Pull("user", 4, absl::MakeConstSpan(&two, 1), before).ok());
  ASSERT_TRUE(client.PushSummed("user", 4, 0, ids, three, grads).ok());
  ASSERT_TRUE(client.Pull("user", 4, absl::MakeConstSpan(&two, 1), after).ok());
  EXPECT_FLOAT_EQ(after[0], before[0] - 1.0f);
}

TEST_F(RowClientTest, RetriesUnavailableUntilItsTimeout) {
  const std::vector<uint64_t> ids = {1, 2, 3, 4, 5, 6};
  std::vector<float> rows(ids.size() * 4);
  Flaky flaky(local_.get(), 5);
  ASSERT_TRUE(Client(&flaky).Pull("user", 4, ids, rows.data()).ok());
  std::vector<float> grads(ids.size() * 4, 1.0f);
  // A retried push applies once: the shards' log sees the repeat.
  Flaky flaky_push(local_.get(), 2);
  std::vector<float> before(rows);
  ASSERT_TRUE(Client(&flaky_push).Push("user", 4, 0, ids, grads).ok());
  ASSERT_TRUE(Client(local_.get()).Push("user", 4, 0, ids, grads).ok());  // again
  ASSERT_TRUE(Client(local_.get()).Pull("user", 4, ids, rows.data()).ok());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_FLOAT_EQ(rows[i], before[i] - 1.0f);
  // Down for good: UNAVAILABLE after the timeout, not a hang.
  Flaky down(local_.get(), 1 << 30);
  const absl::Time start = absl::Now();
  absl::Status s = Client(&down, absl::Milliseconds(200)).Pull("user", 4, ids, rows.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// NOT_FOUND (a restarted shard that does not hold the job yet) is retried
// like UNAVAILABLE, and ends as NOT_FOUND at the timeout.
TEST_F(RowClientTest, NotFoundIsRetriedUntilTheTimeout) {
  Flaky counting(local_.get(), 0);
  std::vector<float> rows(4);
  const uint64_t id = 1;
  absl::Status s = Client(&counting, absl::Milliseconds(200))
                       .Pull("item", 4, {&id, 1}, rows.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("without the job"), std::string::npos) << s;
  EXPECT_GT(counting.calls.load(), 1);
}

TEST_F(RowClientTest, OtherErrorsAreNotRetried) {
  Flaky counting(local_.get(), 0);
  std::vector<float> rows(4);
  const uint64_t id = 1;
  std::vector<float> nan(4, std::nanf(""));
  absl::Status s = Client(&counting).Push("user", 4, 0, {&id, 1}, nan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(counting.calls.load(), 3) << "one call to each of the 3 shards";
  ChannelOptions stale;
  stale.worker_id = "w-1";
  stale.generation = 0;
  auto old = tier_.Rows(stale);
  s = Client(old.get()).Pull("user", 4, {&id, 1}, rows.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
}

}  // namespace
}  // namespace fulcrum
