#include "server/coordinator/coordinator_metrics.h"

#include <algorithm>
#include <map>

namespace fulcrum {

CoordinatorMetrics::CoordinatorMetrics(metrics::Registry& r,
                                       const Coordinator* core)
    : core_(core),
      jobs_(
          r.AddGauge("fulcrum_coordinator_jobs", "Jobs by state.", {"state"})),
      members_(r.AddGauge("fulcrum_coordinator_members",
                          "Registered workers and shards with a valid lease.",
                          {"role"})),
      members_lost_(r.AddCounter(
          "fulcrum_coordinator_members_lost_total",
          "Workers and shards dropped because their lease expired.", {"role"})),
      unauthenticated_(r.AddCounter(
          "fulcrum_coordinator_unauthenticated_total",
          "User-facing calls refused for a missing or wrong API token.", {})),
      live_workers_(r.AddGauge("fulcrum_coordinator_live_workers",
                               "Workers training the job now.", {"job_id"})),
      generation_(r.AddGauge("fulcrum_coordinator_generation",
                             "The job's membership generation.", {"job_id"})),
      running_(r.AddGauge("fulcrum_job_running",
                          "1 while the job is RUNNING, else 0.", {"job_id"})),
      step_(r.AddGauge("fulcrum_job_step", "Steps finished (rank 0's clock).",
                       {"job_id"})),
      loss_(r.AddGauge("fulcrum_job_loss", "Training loss reported by rank 0.",
                       {"job_id"})),
      accuracy_(r.AddGauge("fulcrum_job_test_accuracy",
                           "Latest test-set accuracy.", {"job_id"})),
      samples_per_second_(r.AddGauge(
          "fulcrum_job_samples_per_second",
          "Training throughput summed over the job's workers.", {"job_id"})),
      staleness_max_(
          r.AddGauge("fulcrum_job_staleness_max",
                     "Largest staleness of any read so far, over every shard.",
                     {"job_id"})),
      checkpoint_step_(r.AddGauge(
          "fulcrum_job_checkpoint_step",
          "Newest step every shard of the job has checkpointed (0: none yet).",
          {"job_id"})),
      checkpoint_every_(r.AddGauge(
          "fulcrum_job_checkpoint_every_steps",
          "The job's checkpoint.every_steps (jobs with checkpoints only).",
          {"job_id"})) {
  // Every state and role always has a value, so "no such jobs" reads 0.
  for (const char* s :
       {"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}) {
    jobs_.WithLabels({s}).Set(0);
  }
  for (const char* role : {"worker", "shard"}) {
    members_.WithLabels({role}).Set(0);
    members_lost_.WithLabels({role});
  }
  unauthenticated_.WithLabels();
  r.AddCollector([this] { Collect(); });
}

void CoordinatorMetrics::MemberLost(const std::string& role) {
  members_lost_.WithLabels({role}).Increment();
}

void CoordinatorMetrics::Unauthenticated() {
  unauthenticated_.WithLabels().Increment();
}

void CoordinatorMetrics::Collect() {
  const std::vector<v1::JobStatus> jobs = core_->ListJobs();
  std::map<std::string, int> by_state;
  for (const v1::JobStatus& j : jobs) ++by_state[v1::JobState_Name(j.state())];
  for (const char* s :
       {"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}) {
    jobs_.WithLabels({s}).Set(by_state[s]);
  }
  std::map<std::string, int> by_role;
  for (const v1::Member& m : core_->ListMembers()) ++by_role[m.role()];
  for (const char* role : {"worker", "shard"})
    members_.WithLabels({role}).Set(by_role[role]);

  for (auto* f : {&live_workers_, &generation_, &running_, &step_, &loss_,
                  &accuracy_, &samples_per_second_, &staleness_max_,
                  &checkpoint_step_, &checkpoint_every_}) {
    f->Clear();
  }
  // Running jobs, and the most recently ended ones.
  std::vector<const v1::JobStatus*> shown;
  std::vector<const v1::JobStatus*> ended;
  for (const v1::JobStatus& j : jobs) {
    if (j.state() == v1::RUNNING) {
      shown.push_back(&j);
    } else if (j.state() != v1::PENDING) {
      ended.push_back(&j);
    }
  }
  std::sort(ended.begin(), ended.end(),
            [](const v1::JobStatus* a, const v1::JobStatus* b) {
              return a->end_time_unix() > b->end_time_unix();
            });
  ended.resize(std::min<size_t>(ended.size(), kRecentEnded));
  shown.insert(shown.end(), ended.begin(), ended.end());
  for (const v1::JobStatus* j : shown) {
    const std::vector<std::string> l = {j->job_id()};
    live_workers_.WithLabels(l).Set(j->live_workers());
    generation_.WithLabels(l).Set(static_cast<double>(j->generation()));
    running_.WithLabels(l).Set(j->state() == v1::RUNNING ? 1 : 0);
    step_.WithLabels(l).Set(static_cast<double>(j->progress().step()));
    loss_.WithLabels(l).Set(j->progress().loss());
    samples_per_second_.WithLabels(l).Set(j->progress().samples_per_sec());
    staleness_max_.WithLabels(l).Set(static_cast<double>(j->staleness().max()));
    if (j->spec().checkpoint().every_steps() > 0) {
      checkpoint_step_.WithLabels(l).Set(
          static_cast<double>(j->checkpoint_step()));
      checkpoint_every_.WithLabels(l).Set(
          static_cast<double>(j->spec().checkpoint().every_steps()));
    }
    if (j->progress().evaluated_step() > 0) {
      accuracy_.WithLabels(l).Set(j->progress().test_accuracy());
    }
  }
}

}  // namespace fulcrum
