// WorkerStream: a hello's admission, the initial parameters, and when each
// consistency mode answers a worker's read - without a transport.
#include "server/ps/worker_stream.h"

#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "gtest/gtest.h"
#include "server/ps/testing/test_jobs.h"

namespace fulcrum {
namespace {

using testing::MultiPartitionJob;
using testing::RecordingWriter;

class WorkerStreamTest : public ::testing::Test {
 protected:
  void Init(const std::string& mode, int staleness) {
    JobInit init = MultiPartitionJob({"a", "b"}, "sgd");
    init.spec.mutable_consistency()->set_mode(mode);
    init.spec.mutable_consistency()->set_staleness(staleness);
    ASSERT_TRUE(shard_.InitJob(init).ok());
    job_ = *shard_.Find("job-1");
  }
  std::unique_ptr<WorkerStream> Open(const std::string& worker,
                                     RecordingWriter* w,
                                     absl::Duration timeout = absl::Seconds(10)) {
    WorkerStream::Options o;
    o.step_timeout = timeout;
    auto s = WorkerStream::Open(shard_, {"job-1", worker, 1}, o, w);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // Pushes `worker`'s whole share of `step` (partitions in descending
  // order, as backward completes them).
  absl::Status PushStep(WorkerStream& s, int64_t step) {
    const std::vector<int32_t>& ids = job_->partition_ids();
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      grads_[*it].assign(job_->PartitionSize(*it), 0.5f);
      PushChunk c = testing::Chunk(step, grads_[*it], 1);
      c.partition = *it;
      absl::Status st = s.Push(c);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  // PushStep through PushAsync: *pending once the read waits; `answered`
  // as PushAsync's.
  absl::Status PushStepAsync(WorkerStream& s, int64_t step,
                             const std::function<void(absl::Status)>& answered,
                             bool* pending) {
    const std::vector<int32_t>& ids = job_->partition_ids();
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      grads_[*it].assign(job_->PartitionSize(*it), 0.5f);
      PushChunk c = testing::Chunk(step, grads_[*it], 1);
      c.partition = *it;
      absl::Status st = s.PushAsync(c, answered, pending);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }

  ParameterShard shard_;
  std::shared_ptr<JobShard> job_;
  std::map<int32_t, std::vector<float>> grads_;
};

TEST_F(WorkerStreamTest, HelloIsAdmittedOrRefusedWithTheContractsCodes) {
  Init("sync", 0);
  RecordingWriter w;
  WorkerStream::Options o;
  EXPECT_EQ(WorkerStream::Open(shard_, {"nope", "a", 1}, o, &w).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(
      WorkerStream::Open(shard_, {"job-1", "x", 1}, o, &w).status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      WorkerStream::Open(shard_, {"job-1", "a", 2}, o, &w).status().code(),
      absl::StatusCode::kUnavailable);
  EXPECT_TRUE(w.sent.empty()) << "a refused hello sends nothing";
  auto s = Open("a", &w);
  ASSERT_NE(s, nullptr);
  // Every partition's current values, at clock = version 0.
  EXPECT_EQ(w.WholeAt(0, *job_), job_->partition_ids());
  shard_.EndJob("job-1");
  EXPECT_EQ(
      WorkerStream::Open(shard_, {"job-1", "b", 1}, o, &w).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

// Sync: a's read of step 1 is answered only once b's pushes completed the
// step, partition by partition in the order a completed them.
TEST_F(WorkerStreamTest, SyncAnswersAReadAfterEveryMemberPushed) {
  Init("sync", 0);
  RecordingWriter wa, wb;
  auto a = Open("a", &wa);
  auto b = Open("b", &wb);
  std::thread pusher([&] { EXPECT_TRUE(PushStep(*a, 0).ok()); });
  EXPECT_TRUE(PushStep(*b, 0).ok());
  pusher.join();
  std::vector<int32_t> descending(job_->partition_ids().rbegin(),
                                  job_->partition_ids().rend());
  EXPECT_EQ(wa.WholeAt(1, *job_), descending);
  EXPECT_EQ(wb.WholeAt(1, *job_), descending);
  for (const ParamsHeader& h : wa.sent) {
    if (h.clock == 1) {
      EXPECT_EQ(h.version, 1) << "a read of step 1 is fresh";
    }
  }
  // A repeated push of the step (a stream re-sending it) is acknowledged,
  // answered with the same version, and applies nothing.
  EXPECT_TRUE(PushStep(*a, 0).ok());
  int64_t version;
  bool stop;
  std::vector<float> values(job_->PartitionSize(0));
  ASSERT_TRUE(job_->Read(0, 0, values.size(), values.data(), &version, &stop)
                  .ok());
  EXPECT_EQ(version, 1);
  EXPECT_EQ(wa.sent.back().version, 1);
}

// ssp(1): a may run one clock ahead of b, not two; the read that would be
// two ahead waits for b (here until the deadline, then for b's push).
TEST_F(WorkerStreamTest, SspBoundsHowFarAReaderRunsAhead) {
  Init("ssp", 1);
  RecordingWriter wa, wb;
  auto a = Open("a", &wa, absl::Milliseconds(200));
  auto b = Open("b", &wb);
  ASSERT_TRUE(PushStep(*a, 0).ok());  // read at clock 1: b at 0 >= 1 - 1
  EXPECT_EQ(wa.WholeAt(1, *job_).size(), job_->partition_ids().size());
  EXPECT_EQ(PushStep(*a, 1).code(), absl::StatusCode::kDeadlineExceeded)
      << "clock 2 needs b at clock 1";
  EXPECT_TRUE(wa.WholeAt(2, *job_).empty());
  auto a2 = Open("a", &wa);  // a's new stream: the push was kept
  std::thread reader([&] { EXPECT_TRUE(PushStep(*a2, 1).ok()); });
  ASSERT_TRUE(PushStep(*b, 0).ok());
  reader.join();
  EXPECT_EQ(wa.WholeAt(2, *job_).size(), job_->partition_ids().size());
}

// The callback service's PushAsync: a read that must wait returns at once
// (pending) and is answered by the push that completes the step - on that
// pusher's thread - with the same partitions in the same order as Push.
TEST_F(WorkerStreamTest, PushAsyncAnswersOnTheCompletingPushersThread) {
  Init("sync", 0);
  RecordingWriter wa, wb;
  auto a = Open("a", &wa);
  auto b = Open("b", &wb);
  std::optional<absl::Status> answered;
  std::thread::id answered_on;
  const std::vector<int32_t>& ids = job_->partition_ids();
  bool pending = false;
  ASSERT_TRUE(PushStepAsync(
                  *a, 0,
                  [&](absl::Status s) {
                    answered = s;
                    answered_on = std::this_thread::get_id();
                  },
                  &pending)
                  .ok());
  EXPECT_TRUE(pending) << "a's read waits for b";
  EXPECT_FALSE(answered.has_value());
  EXPECT_TRUE(wa.WholeAt(1, *job_).empty());
  EXPECT_TRUE(PushStep(*b, 0).ok());  // blocking Push beside it
  ASSERT_TRUE(answered.has_value());
  EXPECT_TRUE(answered->ok()) << *answered;
  EXPECT_EQ(answered_on, std::this_thread::get_id());
  std::vector<int32_t> descending(ids.rbegin(), ids.rend());
  EXPECT_EQ(wa.WholeAt(1, *job_), descending);
  // b's read was answered by its own push: nothing pending.
  EXPECT_EQ(wb.WholeAt(1, *job_), descending);
}

TEST_F(WorkerStreamTest, APendingAnswerIsCancelledOnceWithWhatItWaitedFor) {
  Init("sync", 0);
  RecordingWriter wa;
  auto a = Open("a", &wa);
  int calls = 0;
  bool pending = false;
  ASSERT_TRUE(
      PushStepAsync(*a, 0, [&](absl::Status) { ++calls; }, &pending).ok());
  ASSERT_TRUE(pending);
  absl::Status why;
  ASSERT_TRUE(a->CancelAnswer(absl::StatusCode::kDeadlineExceeded, &why));
  EXPECT_EQ(why.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(why.message().find("partition"), std::string::npos) << why;
  EXPECT_FALSE(a->CancelAnswer(absl::StatusCode::kCancelled, &why))
      << "nothing waits any more";
  // b completing the step runs no callback of a's.
  RecordingWriter wb;
  auto b = Open("b", &wb);
  EXPECT_TRUE(PushStep(*b, 0).ok());
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(wa.WholeAt(1, *job_).empty());
}

// A cancel that lands before the answer starts (the reactor marked itself
// answering, then the peer cancelled, then PushAsync ran) is not forgotten:
// the answer ends with it at its first wait instead of waiting for the
// other workers (until step_timeout, before).
TEST_F(WorkerStreamTest, ACancelBeforeTheAnswerStartsEndsIt) {
  Init("sync", 0);
  RecordingWriter wa;
  auto a = Open("a", &wa);
  absl::Status why;
  EXPECT_FALSE(a->CancelAnswer(absl::StatusCode::kCancelled, &why))
      << "nothing waits yet";
  int calls = 0;
  bool pending = true;
  const absl::Status s =
      PushStepAsync(*a, 0, [&](absl::Status) { ++calls; }, &pending);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_FALSE(pending) << "the cancel was forgotten: the read waits for b";
  RecordingWriter wb;
  auto b = Open("b", &wb);
  EXPECT_TRUE(PushStep(*b, 0).ok());
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(wa.WholeAt(1, *job_).empty());
}

// ssp(0) waits in the clock table, not on versions: the same contract.
TEST_F(WorkerStreamTest, PushAsyncWaitsForTheClockBoundInSsp) {
  Init("ssp", 0);
  RecordingWriter wa, wb;
  auto a = Open("a", &wa);
  auto b = Open("b", &wb);
  std::optional<absl::Status> answered;
  bool pending = false;
  ASSERT_TRUE(
      PushStepAsync(*a, 0, [&](absl::Status s) { answered = s; }, &pending)
          .ok());
  ASSERT_TRUE(pending);
  EXPECT_TRUE(PushStep(*b, 0).ok());
  ASSERT_TRUE(answered.has_value());
  EXPECT_TRUE(answered->ok()) << *answered;
  EXPECT_EQ(wa.WholeAt(1, *job_).size(), job_->partition_ids().size());
}

}  // namespace
}  // namespace fulcrum

namespace fulcrum {
namespace {

TEST(ExternalModelStreamTest, AHelloWaitsForTheValues) {
  JobInit init = testing::TinyJob({"a"});
  init.spec.mutable_model()->clear_layers();
  init.spec.mutable_model()->set_type("external");
  v1::TensorSpec* w = init.spec.mutable_model()->add_tensors();
  w->set_name("w");
  w->add_shape(10);
  ParameterShard shard;
  auto job = shard.InitJob(init);
  ASSERT_TRUE(job.ok()) << job.status();
  RecordingWriter writer;
  auto early = WorkerStream::Open(shard, {"job-1", "a", 1}, {}, &writer);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(writer.sent.empty());
  std::vector<float> values(10, 0.5f);
  ASSERT_TRUE((*job)
                  ->Initialize("a", 1, 0, 0,
                               reinterpret_cast<const char*>(values.data()), 40)
                  .ok());
  auto stream = WorkerStream::Open(shard, {"job-1", "a", 1}, {}, &writer);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(writer.WholeAt(0, **job), (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace fulcrum
