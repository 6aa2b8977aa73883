#include "worker/agent_state.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

using Phase = AgentState::Phase;
using Kind = AgentState::Work::Kind;

v1::WorkerAssignment Running(const std::string& job, int64_t generation) {
  v1::WorkerAssignment a;
  a.set_job_id(job);
  a.set_generation(generation);
  a.set_job_state(v1::RUNNING);
  return a;
}

v1::WorkerAssignment Offer(const std::string& job) {
  v1::WorkerAssignment a;
  a.set_job_id(job);
  a.set_job_state(v1::RUNNING);
  a.set_prepare(true);
  return a;
}

TEST(AgentStateTest, AnAssignmentIsTrainedAndItsNextGenerationsFollow) {
  AgentState s;
  EXPECT_FALSE(s.Take().has_value());
  EXPECT_TRUE(s.OnAnswer(Running("job-1", 1)));
  auto work = s.Take();
  ASSERT_TRUE(work.has_value());
  EXPECT_EQ(work->kind, Kind::kTrain);
  EXPECT_EQ(s.phase(), Phase::kTraining);
  v1::WorkerHeartbeatRequest beat;
  s.FillHeartbeat(&beat);
  EXPECT_EQ(beat.job_id(), "job-1");
  EXPECT_EQ(beat.generation(), 1);
  EXPECT_FALSE(s.OnAnswer(Running("job-1", 1))) << "nothing new";
  EXPECT_FALSE(s.TakeNextGeneration("job-1", 1).has_value());
  EXPECT_TRUE(s.OnAnswer(Running("job-1", 3)));
  auto next = s.TakeNextGeneration("job-1", 1);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->generation(), 3);
  EXPECT_EQ(s.generation(), 3);
  s.Finished();
  EXPECT_EQ(s.phase(), Phase::kIdle);
  EXPECT_FALSE(s.OnAnswer(Running("job-1", 3))) << "a finished job stays done";
  EXPECT_FALSE(s.has_work());
}

TEST(AgentStateTest, CancelledFailedElsewhereOrForgottenMeansLeaving) {
  for (int way = 0; way < 3; ++way) {
    AgentState s;
    s.OnAnswer(Running("job-1", 1));
    s.Take();
    v1::WorkerAssignment ended = Running("job-1", 1);
    ended.set_job_state(v1::CANCELLED);
    if (way == 0) {
      EXPECT_TRUE(s.OnAnswer(ended));
    } else if (way == 1) {
      EXPECT_TRUE(s.OnAnswer(v1::WorkerAssignment()));
    } else {
      s.OnForgotten();
    }
    EXPECT_TRUE(s.leaving()) << way;
    v1::WorkerHeartbeatRequest beat;
    s.FillHeartbeat(&beat);
    EXPECT_EQ(beat.job_id(), "job-1") << "still says which job it leaves";
  }
}

// A worker forgotten mid-job (its lease expired) registers as a new member:
// the job may take it in again, where a finished part is never re-offered.
TEST(AgentStateTest, AForgottenWorkerMayJoinItsJobAgain) {
  for (bool forgotten : {false, true}) {
    AgentState s;
    s.OnAnswer(Running("job-1", 1));
    s.Take();
    if (forgotten) s.OnForgotten();
    s.Finished();
    EXPECT_TRUE(s.OnAnswer(Offer("job-1"))) << forgotten;
    EXPECT_EQ(s.phase(),
              forgotten ? Phase::kOffered : Phase::kPrepared)
        << "finished: declined";
  }
}

TEST(AgentStateTest, AJobThatEndedBeforeTakingTheWorkerInIsToldOnce) {
  for (bool offered : {false, true}) {
    AgentState s;
    if (offered) {
      s.OnAnswer(Offer("job-1"));
      s.Take();
      s.Prepared("job-1", absl::OkStatus(), absl::FromUnixSeconds(1));
    }
    v1::WorkerAssignment ended;
    ended.set_job_id("job-1");
    ended.set_job_state(v1::FAILED);
    ended.set_job_message("worker w-1: nan");
    EXPECT_TRUE(s.OnAnswer(ended));
    ASSERT_TRUE(s.has_work());
    auto work = s.Take();
    ASSERT_TRUE(work.has_value());
    EXPECT_EQ(work->kind, Kind::kEnded);
    EXPECT_EQ(work->assignment.job_message(), "worker w-1: nan");
    EXPECT_EQ(s.phase(), Phase::kIdle);
    EXPECT_FALSE(s.OnAnswer(ended)) << "told once";
    EXPECT_FALSE(s.has_work());
  }
}

TEST(AgentStateTest, AnOfferIsPreparedReportedThenTakenInByItsGeneration) {
  AgentState s;
  const absl::Time now = absl::FromUnixSeconds(100);
  EXPECT_TRUE(s.OnAnswer(Offer("job-2")));
  EXPECT_EQ(s.phase(), Phase::kOffered);
  auto work = s.Take();
  ASSERT_TRUE(work.has_value());
  EXPECT_EQ(work->kind, Kind::kPrepare);
  EXPECT_FALSE(s.OnAnswer(Offer("job-2"))) << "the same offer again";
  s.Prepared("job-2", absl::OkStatus(), now);
  EXPECT_EQ(s.phase(), Phase::kPrepared);
  EXPECT_TRUE(s.FastPoll(now + absl::Seconds(9)));
  EXPECT_FALSE(s.FastPoll(now + absl::Seconds(11)));
  v1::WorkerHeartbeatRequest beat;
  s.FillHeartbeat(&beat);
  EXPECT_EQ(beat.prepared_job(), "job-2");
  EXPECT_EQ(beat.prepare_error(), "");
  EXPECT_EQ(beat.job_id(), "") << "not a member yet";
  EXPECT_TRUE(s.OnAnswer(Running("job-2", 4)));
  work = s.Take();
  ASSERT_TRUE(work.has_value());
  EXPECT_EQ(work->kind, Kind::kTrain);
  EXPECT_EQ(s.generation(), 4);
}

TEST(AgentStateTest, AFailedPreparationAndAnOfferOfAFinishedJobAreDeclined) {
  AgentState s;
  s.OnAnswer(Offer("job-3"));
  s.Take();
  s.Prepared("job-3", absl::NotFoundError("no data"), absl::Now());
  v1::WorkerHeartbeatRequest beat;
  s.FillHeartbeat(&beat);
  EXPECT_EQ(beat.prepared_job(), "job-3");
  EXPECT_NE(beat.prepare_error().find("no data"), std::string::npos);

  AgentState done;
  done.OnAnswer(Running("job-4", 1));
  done.Take();
  done.Finished();
  done.OnAnswer(Offer("job-4"));
  EXPECT_EQ(done.phase(), Phase::kPrepared);
  EXPECT_FALSE(done.has_work()) << "nothing to load";
  v1::WorkerHeartbeatRequest again;
  done.FillHeartbeat(&again);
  EXPECT_EQ(again.prepared_job(), "job-4");
  EXPECT_NE(again.prepare_error().find("already ended"), std::string::npos);
}

// The job refused the paused worker (its training ended) before the
// heartbeat said the coordinator forgot it: registered again under a new
// id, it may still be offered a place in that job.
TEST(AgentStateTest, ForgottenAfterItsTrainingEndedItMayRejoinTheJob) {
  AgentState s;
  s.OnAnswer(Running("job-7", 1));
  s.Take();
  s.Finished();  // "not a member of job-7"
  s.OnForgotten();
  s.OnAnswer(Offer("job-7"));
  EXPECT_EQ(s.phase(), Phase::kOffered);
  auto work = s.Take();
  ASSERT_TRUE(work.has_value());
  EXPECT_EQ(work->kind, Kind::kPrepare);
}

TEST(AgentStateTest, AnAssignmentDuringTrainingWaitsForTheLoop) {
  AgentState s;
  s.OnAnswer(Running("job-5", 1));
  s.Take();
  s.OnForgotten();  // re-registered under a new id, still winding down
  EXPECT_TRUE(s.OnAnswer(Running("job-6", 1)));
  EXPECT_EQ(s.job().job_id(), "job-5");
  s.Finished();
  auto work = s.Take();
  ASSERT_TRUE(work.has_value());
  EXPECT_EQ(work->assignment.job_id(), "job-6");
}

}  // namespace
}  // namespace fulcrum
