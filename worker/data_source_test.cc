#include "worker/data_source.h"

#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "common/tensor/layout.h"
#include "worker/worker_session.h"

namespace fulcrum {
namespace {

// A coordinator that leases chunk 0 of epoch 0 (samples 0..99), then
// nothing (exhausted).
class OneChunkLink : public JobLink {
 public:
  void Update(const v1::Progress&) override {}
  bool Leaving() override { return false; }
  std::optional<Assignment> NextAssignment(const std::string&, int64_t,
                                           absl::Time) override {
    return std::nullopt;
  }
  absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest&) override {
    ++leases;
    v1::LeaseChunkResponse r;
    if (leases == 1) {
      r.mutable_chunk()->set_chunk(0);
      r.mutable_chunk()->set_begin(0);
      r.mutable_chunk()->set_end(100);
    } else {
      r.set_exhausted(true);
    }
    return r;
  }
  int leases = 0;
};

// A coordinator that does not answer the first `unanswered` lease calls
// (UNAVAILABLE), then leases as OneChunkLink; Leaving() once `leave_after`
// calls went unanswered (0: never).
class UnreachableLink : public OneChunkLink {
 public:
  explicit UnreachableLink(int unanswered, int leave_after = 0)
      : unanswered_(unanswered), leave_after_(leave_after) {}
  bool Leaving() override {
    return leave_after_ > 0 && refused >= leave_after_;
  }
  absl::StatusOr<v1::LeaseChunkResponse> LeaseChunk(
      const v1::LeaseChunkRequest& r) override {
    if (refused < unanswered_) {
      ++refused;
      return absl::UnavailableError("coordinator unreachable");
    }
    return OneChunkLink::LeaseChunk(r);
  }
  int refused = 0;

 private:
  const int unanswered_;
  const int leave_after_;
};

Assignment AssignmentFor(const std::string& sharding) {
  Assignment a;
  a.job_id = "j";
  a.spec.set_batch_size(64);
  a.spec.mutable_dataset()->set_sharding(sharding);
  a.rank = 1;
  a.world_size = 2;
  return a;
}

// A session for the sources to read the assignment from (never joined).
struct Session {
  explicit Session(const Assignment& a, JobLink* link = nullptr)
      : layout(*ParameterLayout::ForMlp({4, 2}, 1, 1 << 20)),
        params(layout.total_size()),
        session({}, a, &layout, params.data(), nullptr, link) {}
  ParameterLayout layout;
  std::vector<float> params;
  WorkerSession session;
};

void ExpectSame(const StepSamples& a, const StepSamples& b) {
  EXPECT_EQ(a.share.begin, b.share.begin);
  EXPECT_EQ(a.share.count, b.share.count);
  EXPECT_EQ(a.range.chunk, b.range.chunk);
  EXPECT_EQ(a.range.begin, b.range.begin);
  EXPECT_EQ(a.range.end, b.range.end);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.exhausted, b.exhausted);
}

// Peek tells what Next will return inside an epoch whose order is loaded,
// and nothing where the next epoch's order would have to be made.
TEST(DataSourceTest, StaticPeekIsNextWithinALoadedEpoch) {
  const Assignment a = AssignmentFor("static");
  Session s(a);
  // 1,000 samples, global batch 128: 8 steps an epoch.
  auto source = DataSource::ForSpec(a.spec, 1000, &s.session);
  EXPECT_FALSE(source->Peek(0).has_value());  // no order yet
  ASSERT_TRUE(source->Next(0).ok());
  const int64_t* order = source->order();
  std::vector<int64_t> epoch0(order, order + 1000);
  for (int64_t step = 1; step < 8; ++step) {
    const std::optional<StepSamples> peeked = source->Peek(step);
    ASSERT_TRUE(peeked.has_value()) << "step " << step;
    const absl::StatusOr<StepSamples> next = source->Next(step);
    ASSERT_TRUE(next.ok());
    ExpectSame(*peeked, *next);
  }
  EXPECT_FALSE(source->Peek(8).has_value());  // epoch 1: a new order
  EXPECT_EQ(std::vector<int64_t>(source->order(), source->order() + 1000),
            epoch0);  // Peek left the order alone
  ASSERT_TRUE(source->Next(8).ok());
  EXPECT_TRUE(source->Peek(9).has_value());
}

// Chunk sharding: known while the lease lasts; Peek never asks for one.
TEST(DataSourceTest, ChunkPeekIsNextWhileTheLeaseLasts) {
  const Assignment a = AssignmentFor("chunks");
  OneChunkLink link;
  Session s(a, &link);
  auto source = DataSource::ForSpec(a.spec, 1000, &s.session);
  source->StartGeneration();
  EXPECT_FALSE(source->Peek(0).has_value());
  EXPECT_EQ(link.leases, 0);
  const absl::StatusOr<StepSamples> first = source->Next(0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->share.count, 64);
  EXPECT_EQ(link.leases, 1);
  const std::optional<StepSamples> peeked = source->Peek(1);
  ASSERT_TRUE(peeked.has_value());
  EXPECT_EQ(peeked->share.begin, 64);
  EXPECT_EQ(peeked->share.count, 36);  // the rest of the chunk
  const absl::StatusOr<StepSamples> second = source->Next(1);
  ASSERT_TRUE(second.ok());
  ExpectSame(*peeked, *second);
  // The chunk is done: the next samples need a lease, which Peek does not
  // ask for.
  EXPECT_FALSE(source->Peek(2).has_value());
  EXPECT_EQ(link.leases, 1);
}

// A coordinator that does not answer costs no empty step: the source waits
// for it (the session asks again, counting the wait) and then trains the
// chunk it leases. Until 2026-12-07 each unanswered call was an empty
// step, and a 5 s outage ran a job through its max_steps.
TEST(DataSourceTest, AnUnansweredLeaseIsWaitedForNotAnEmptyStep) {
  const Assignment a = AssignmentFor("chunks");
  UnreachableLink link(5);
  WorkerSession::Options o;
  absl::Duration waited;
  o.on_coordinator_wait = [&waited](absl::Duration d) { waited += d; };
  o.lease_backoff_max = absl::Milliseconds(20);
  ParameterLayout layout = *ParameterLayout::ForMlp({4, 2}, 1, 1 << 20);
  std::vector<float> params(layout.total_size());
  WorkerSession session(o, a, &layout, params.data(), nullptr, &link);
  auto source = DataSource::ForSpec(a.spec, 1000, &session);
  source->StartGeneration();
  const absl::StatusOr<StepSamples> first = source->Next(0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->share.count, 64) << "a step with data, not an empty one";
  EXPECT_EQ(link.refused, 5);
  EXPECT_EQ(link.leases, 1);
  EXPECT_GT(waited, absl::ZeroDuration());
}

// A worker that leaves while waiting stops waiting (CANCELLED).
TEST(DataSourceTest, AWorkerLeavingStopsWaitingForALease) {
  const Assignment a = AssignmentFor("chunks");
  UnreachableLink link(1000, 3);
  WorkerSession::Options o;
  o.lease_backoff_max = absl::Milliseconds(5);
  ParameterLayout layout = *ParameterLayout::ForMlp({4, 2}, 1, 1 << 20);
  std::vector<float> params(layout.total_size());
  WorkerSession session(o, a, &layout, params.data(), nullptr, &link);
  auto source = DataSource::ForSpec(a.spec, 1000, &session);
  source->StartGeneration();
  EXPECT_EQ(source->Next(0).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(link.refused, 3);
}

}  // namespace
}  // namespace fulcrum
