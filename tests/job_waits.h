// Waiting on a ProcessCluster's jobs in multi-process tests: submit a job
// file, poll its status until a condition holds (a test failure naming what
// was awaited, with every process's log, once the time is up), and the
// predicates the tests share.
#ifndef FULCRUM_TESTS_JOB_WAITS_H_
#define FULCRUM_TESTS_JOB_WAITS_H_

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "tests/process_cluster.h"

namespace fulcrum::testing {

// `fulcrumctl submit`; the job's id (a test failure if refused).
std::string SubmitJob(ProcessCluster& c, const std::string& job_file);

// Polls the job's status every 50 ms until `done` holds or `timeout`
// passes (then ADD_FAILURE); returns the last status read.
v1::JobStatus WaitForJob(ProcessCluster& c, const std::string& job,
                         const std::function<bool(const v1::JobStatus&)>& done,
                         absl::Duration timeout, const std::string& what);

bool JobEnded(const v1::JobStatus& s);
// Membership events of `kind` ("lost", "rejoined", ...) in the status.
int CountEvents(const v1::JobStatus& s, const std::string& kind);

}  // namespace fulcrum::testing

#endif  // FULCRUM_TESTS_JOB_WAITS_H_
