// Control-plane outages with real processes on three "hosts" (network
// namespaces on one bridge, tests/multihost/host_network.h): the
// coordinator on host 0, both shards on host 1, both workers on host 2.
// Faults as an operator sees them: a process paused (SIGSTOP) or killed,
// a host's link down. Each case asserts that the job SUCCEEDED, trained
// every sample of every epoch exactly once (the shards' ledger), took the
// steps of an undisturbed run (within 1%: no empty steps) and trained on
// soon after the fault ended.
//
// Needs root; skips, saying why, where it cannot make namespaces.
#include <unistd.h>

#include <csignal>
#include <algorithm>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/process.h"
#include "gtest/gtest.h"
#include "tests/job_waits.h"
#include "tests/multihost/host_network.h"
#include "tests/process_cluster.h"

namespace fulcrum {
namespace {

using testing::HostNetwork;
using testing::ProcessCluster;
using testing::SubmitJob;
using testing::WaitForJob;

constexpr char kDataset[] =
    "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
constexpr int kSamples = 6000;
constexpr int kEpochs = 8;
constexpr int kCoordinatorHost = 0, kShardHost = 1, kWorkerHost = 2;
// A training step is "resumed" once the job's step is this far past the
// status read when the fault ended: more than a chunk's 16 steps, which a
// worker may have trained and not yet reported while cut off.
constexpr int kResumedSteps = 20;

std::string Job(const std::string& name, const std::string& extra,
                const std::string& sharding = "chunks") {
  const std::string path = testing::TestTempDir() + "/" + name + ".yaml";
  std::ofstream(path) << "name: " << name << R"(
model: {type: mlp, layers: [784, 64, 10]}
dataset: {dir: /usr/share/datasets/fashion-mnist, train_limit: 6000, test_limit: 1000, sharding: )"
                      << sharding << R"(}
optimizer: {type: momentum, lr: 0.02, momentum: 0.9}
batch_size: 32
seed: 5
eval_every_steps: 50
workers: {min: 2, max: 2}
shards: 2
checkpoint: {every_steps: 50, dir: ckpt-)"
                      << name << "}\n"
                      << extra;
  return path;
}

bool Ended(const v1::JobStatus& s) { return testing::JobEnded(s); }

class OutageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(kDataset, R_OK), 0)
        << kDataset << " is missing: run tools/setup.sh";
    absl::StatusOr<std::unique_ptr<HostNetwork>> net = HostNetwork::Create(3);
    if (!net.ok()) {
      GTEST_SKIP() << "multi-host outage tests skipped: "
                   << net.status().message();
    }
    net_ = std::move(*net);
  }

  ProcessCluster::Options Cluster(std::vector<std::string> coordinator = {}) {
    HostNetwork* net = net_.get();
    coordinator.push_back("--insecure");  // plaintext off loopback
    coordinator.push_back("--lease_ms=5000");
    return {.shards = 2,
            .workers = 2,
            // Another host's shards: no shared memory with them.
            .worker_flags = {"--shared_memory=false"},
            .coordinator_flags = coordinator,
            .shard_flags = {"--insecure"},
            .host_of = [net](const std::string& process) {
              const int host = process == "coordinator"       ? kCoordinatorHost
                               : process.rfind("shard", 0) == 0 ? kShardHost
                                                                : kWorkerHost;
              return ProcessCluster::Host{net->Namespace(host),
                                          net->Address(host)};
            }};
  }

  v1::JobStatus WaitForStep(ProcessCluster& c, const std::string& job,
                            int64_t step) {
    return WaitForJob(
        c, job,
        [step](const v1::JobStatus& s) {
          return Ended(s) || s.progress().step() >= step;
        },
        absl::Seconds(60), absl::StrCat("step ", step));
  }

  // After a fault ended: the job trains kResumedSteps steps past what the
  // status said then (and before the fault), within `limit`. Returns how long that took.
  // `before`: the job's step when the fault began.
  // `ended`: when the fault ended (default: now).
  absl::Duration ExpectResumed(ProcessCluster& c, const std::string& job,
                               int64_t before, absl::Duration limit,
                               absl::Time ended = absl::Now()) {
    v1::JobStatus s = WaitForJob(
        c, job, [](const v1::JobStatus&) { return true; }, absl::Seconds(30),
        "a status after the fault");
    const int64_t from = std::max(before, s.progress().step());
    s = WaitForJob(
        c, job,
        [from](const v1::JobStatus& s) {
          return Ended(s) || s.progress().step() >= from + kResumedSteps;
        },
        absl::Seconds(90), "training to resume");
    const absl::Duration took = absl::Now() - ended;
    EXPECT_LE(took, limit) << "training resumed " << took
                           << " after the fault ended (from step " << from
                           << ")\n"
                           << s.DebugString();
    std::cerr << "resumed " << kResumedSteps << " steps past step " << from
              << " in " << took << "\n";
    return took;
  }

  // SUCCEEDED, every epoch's samples trained exactly once, and (with
  // `same_steps`) the job's steps within 1% of an undisturbed run's.
  void ExpectFinishedLikeUndisturbed(ProcessCluster& c, const std::string& job,
                                     bool same_steps = true) {
    v1::JobStatus s = WaitForJob(
        c, job, [](const v1::JobStatus& s) { return Ended(s); },
        absl::Minutes(4), "the job to end");
    ASSERT_EQ(s.state(), v1::SUCCEEDED) << s.message() << c.Logs();
    s = WaitForJob(
        c, job,
        [](const v1::JobStatus& s) {
          if (s.epochs_size() != kEpochs) return false;
          for (const v1::EpochSamples& e : s.epochs())
            if (e.trained() != kSamples) return false;
          return true;
        },
        absl::Seconds(10), "every epoch's ledger to be complete");
    ASSERT_EQ(s.epochs_size(), kEpochs);
    for (const v1::EpochSamples& e : s.epochs()) {
      EXPECT_EQ(e.trained(), kSamples)
          << "epoch " << e.epoch() << " not trained exactly once";
    }
    // Every member of the last generation finished (those that learn of
    // the end from a heartbeat had no "finished" event).
    std::set<std::string> finished;
    for (const v1::MembershipEvent& e : s.events())
      if (e.kind() == "finished") finished.insert(e.member_id());
    for (const std::string& w : s.workers())
      EXPECT_EQ(finished.count(w), 1u) << w << " has no finished event";
    if (!same_steps) return;
    const int64_t base = UndisturbedSteps();
    ASSERT_GT(base, 0);
    EXPECT_NEAR(s.progress().step(), base, 0.01 * base)
        << "steps of the disturbed run vs an undisturbed one\n"
        << s.DebugString();
  }

  // The steps the same job takes undisturbed on the same hosts (run once
  // per test binary).
  int64_t UndisturbedSteps() {
    static int64_t steps = 0;
    if (steps > 0) return steps;
    ProcessCluster c("undisturbed", Cluster());
    if (c.address().empty()) return 0;
    const std::string job = SubmitJob(c, Job("undisturbed", Epochs()));
    v1::JobStatus s = WaitForJob(
        c, job, [](const v1::JobStatus& s) { return Ended(s); },
        absl::Minutes(4), "the undisturbed job to end");
    if (s.state() == v1::SUCCEEDED) steps = s.progress().step();
    std::cerr << "undisturbed run: " << steps << " steps\n";
    return steps;
  }

  static std::string Epochs() { return absl::StrCat("epochs: ", kEpochs, "\n"); }

  // Pauses `processes` (SIGSTOP) for `d`, then resumes them.
  void Pause(ProcessCluster& c, const std::vector<std::string>& processes,
             absl::Duration d) {
    for (const std::string& p : processes) c.Signal(p, SIGSTOP);
    absl::SleepFor(d);
    for (const std::string& p : processes) c.Signal(p, SIGCONT);
  }

  void CutHost(int host, absl::Duration d) {
    ASSERT_TRUE(net_->Cut(host).ok());
    absl::SleepFor(d);
    ASSERT_TRUE(net_->Heal(host).ok());
  }

  // A job on the three hosts, disturbed by `fault` at step 60. A crash
  // (a process killed and started again at once) ends when it begins:
  // resumption counts from then, read once the reports show the stall.
  enum class Fault { kOutage, kCrash };
  void RunWithFault(const std::string& name,
                    const std::function<void(ProcessCluster&)>& fault,
                    absl::Duration resume_limit = absl::Seconds(2),
                    bool same_steps = true, Fault kind = Fault::kOutage) {
    ProcessCluster c(name, Cluster());
    ASSERT_FALSE(c.address().empty()) << c.Logs();
    const std::string job = SubmitJob(c, Job(name, Epochs()));
    v1::JobStatus s = WaitForStep(c, job, 60);
    ASSERT_FALSE(Ended(s)) << "the job ended before the fault\n"
                           << s.DebugString();
    const absl::Time began = absl::Now();
    fault(c);
    if (kind == Fault::kCrash) {
      absl::SleepFor(absl::Seconds(1));  // reports trail the job's step
      ExpectResumed(c, job, s.progress().step(), resume_limit, began);
    } else {
      ExpectResumed(c, job, s.progress().step(), resume_limit);
    }
    if (HasFailure()) return;  // a wedged job would only time out again
    ExpectFinishedLikeUndisturbed(c, job, same_steps);
  }

  std::unique_ptr<HostNetwork> net_;
};

// The coordinator paused past every lease: no member may be expired for
// the time the coordinator itself did not run (the job was wedged for good).
TEST_F(OutageTest, CoordinatorPaused8s) {
  RunWithFault("pause-coordinator-8", [this](ProcessCluster& c) {
    Pause(c, {"coordinator"}, absl::Seconds(8));
  });
}

TEST_F(OutageTest, CoordinatorPaused30s) {
  RunWithFault("pause-coordinator-30", [this](ProcessCluster& c) {
    Pause(c, {"coordinator"}, absl::Seconds(30));
  });
}

// Every member paused past its lease: they lapse, and come back into
// their job when they resume (the shards with their state: no restore).
TEST_F(OutageTest, AllMembersPaused8s) {
  RunWithFault("pause-members-8", [this](ProcessCluster& c) {
    Pause(c, {"shard-1", "shard-2", "worker-1", "worker-2"}, absl::Seconds(8));
  });
}

TEST_F(OutageTest, CoordinatorHostCut15s) {
  RunWithFault("cut-coordinator-15", [this](ProcessCluster&) {
    CutHost(kCoordinatorHost, absl::Seconds(15));
  });
}

TEST_F(OutageTest, CoordinatorHostCut40s) {
  RunWithFault("cut-coordinator-40", [this](ProcessCluster&) {
    CutHost(kCoordinatorHost, absl::Seconds(40));
  });
}

TEST_F(OutageTest, ShardHostCut15s) {
  RunWithFault("cut-shards-15", [this](ProcessCluster&) {
    CutHost(kShardHost, absl::Seconds(15));
  });
}

TEST_F(OutageTest, ShardHostCut40s) {
  RunWithFault("cut-shards-40", [this](ProcessCluster&) {
    CutHost(kShardHost, absl::Seconds(40));
  });
}

TEST_F(OutageTest, WorkerHostCut15s) {
  RunWithFault("cut-workers-15", [this](ProcessCluster&) {
    CutHost(kWorkerHost, absl::Seconds(15));
  });
}

TEST_F(OutageTest, WorkerHostCut40s) {
  RunWithFault("cut-workers-40", [this](ProcessCluster&) {
    CutHost(kWorkerHost, absl::Seconds(40));
  });
}

// Crashes, for the failure table (docs/operations.md): a process killed
// and started again at once, as a supervisor would. "Resumed" counts from
// the kill: the job 20 steps past where it stood.
//
// A worker: the survivor waits for its lease (5 s) to expire and trains
// on; the restarted process registers as a new member and joins. Some
// rounds run without it, so the job takes more steps than undisturbed.
TEST_F(OutageTest, WorkerKilledAndRestarted) {
  RunWithFault(
      "kill-worker",
      [](ProcessCluster& c) {
        c.Kill("worker-1");
        c.Restart("worker-1");
      },
      absl::Seconds(5 + 2), /*same_steps=*/false, Fault::kCrash);
}

// A shard: the restarted process takes its address once the dead one's
// lease ran out (5 s); the job restores every shard from the newest
// checkpoint (every 50 steps) and redoes the steps since, with the
// ledger's data. So "resumed" (20 steps past where the job stood) also
// counts up to 50 redone steps (~1 s here): the bound is the lease + 4 s.
TEST_F(OutageTest, ShardKilledAndRestarted) {
  RunWithFault(
      "kill-shard",
      [](ProcessCluster& c) {
        c.Kill("shard-1");
        c.Restart("shard-1");
      },
      absl::Seconds(5 + 4), /*same_steps=*/true, Fault::kCrash);
}

// The coordinator killed for 5 s during a max_steps job and restarted
// (--state_dir): workers wait for their chunk leases instead of racing
// through empty steps to max_steps (a 5 s outage once ended such a job
// with 23% of its samples trained, reported SUCCEEDED).
TEST_F(OutageTest, CoordinatorKilled5sDuringAMaxStepsJob) {
  const std::string state = testing::TestTempDir() + "/killed-state";
  ProcessCluster c("kill-coordinator-5",
                   Cluster({"--state_dir=" + state}));
  ASSERT_FALSE(c.address().empty()) << c.Logs();
  const std::string extra = "epochs: 100\nmax_steps: 500\n";
  const std::string job = SubmitJob(c, Job("kill-coordinator-5", extra));
  v1::JobStatus s = WaitForStep(c, job, 60);
  ASSERT_FALSE(Ended(s));
  c.Kill("coordinator");
  absl::SleepFor(absl::Seconds(5));
  c.Restart("coordinator");
  ExpectResumed(c, job, s.progress().step(), absl::Seconds(5 + 2));
  if (HasFailure()) return;
  s = WaitForJob(
      c, job, [](const v1::JobStatus& s) { return Ended(s); },
      absl::Minutes(4), "the job to end");
  ASSERT_EQ(s.state(), v1::SUCCEEDED) << s.message() << c.Logs();
  EXPECT_EQ(s.progress().step(), 500);
  // Every step trained data: the ledger holds what 500 undisturbed steps
  // hold (within 1%), every sample at most once.
  const int64_t undisturbed = 500 * 2 * 32;
  s = *c.StatusWithLedger(job, undisturbed * 99 / 100);
  int64_t trained = 0;
  for (const v1::EpochSamples& e : s.epochs()) {
    EXPECT_LE(e.trained(), kSamples) << "epoch " << e.epoch();
    trained += e.trained();
  }
  EXPECT_GE(trained, undisturbed * 99 / 100)
      << "samples trained in 500 steps of 2 x 32\n"
      << s.DebugString();
}

// The job finishes training while the coordinator is down: the workers'
// "done" is retried until the restarted coordinator answers, and the job
// ends SUCCEEDED (it stayed RUNNING for good: the report was given up
// after 5 tries). Static sharding: training needs no lease meanwhile.
TEST_F(OutageTest, TheLastStepReportedWhileTheCoordinatorIsDown) {
  const std::string state = testing::TestTempDir() + "/done-state";
  ProcessCluster c("done-while-down", Cluster({"--state_dir=" + state}));
  ASSERT_FALSE(c.address().empty()) << c.Logs();
  const std::string job =
      SubmitJob(c, Job("done-while-down", "epochs: 4\n", "static"));
  v1::JobStatus s = WaitForStep(c, job, 30);
  ASSERT_FALSE(Ended(s));
  c.Kill("coordinator");
  // Both workers finish their part meanwhile.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  auto done = [&c](const std::string& w) {
    return testing::ReadFile(c.dir() + "/" + w + ".log").find(" done at step") !=
           std::string::npos;
  };
  while (absl::Now() < deadline && !(done("worker-1") && done("worker-2")))
    absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(done("worker-1") && done("worker-2")) << c.Logs();
  absl::SleepFor(absl::Seconds(10));  // their reports keep failing
  c.Restart("coordinator");
  s = WaitForJob(
      c, job, [](const v1::JobStatus& s) { return Ended(s); },
      absl::Seconds(5 + 10), "the job to end after the coordinator is back");
  EXPECT_EQ(s.state(), v1::SUCCEEDED) << s.message() << c.Logs();
}

}  // namespace
}  // namespace fulcrum
