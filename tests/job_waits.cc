#include "tests/job_waits.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace fulcrum::testing {

std::string SubmitJob(ProcessCluster& c, const std::string& job_file) {
  RunResult r = c.Ctl({"submit", job_file});
  EXPECT_EQ(r.exit_code, 0) << r.out << c.Logs();
  return r.out.substr(0, r.out.find('\n'));
}

v1::JobStatus WaitForJob(ProcessCluster& c, const std::string& job,
                         const std::function<bool(const v1::JobStatus&)>& done,
                         absl::Duration timeout, const std::string& what) {
  const absl::Time deadline = absl::Now() + timeout;
  v1::JobStatus last;
  while (absl::Now() < deadline) {
    absl::StatusOr<v1::JobStatus> s = c.Status(job);
    if (s.ok()) {
      last = *s;
      if (done(last)) return last;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ADD_FAILURE() << "timed out waiting for " << what << "; last status:\n"
                << last.DebugString() << c.Logs();
  return last;
}

bool JobEnded(const v1::JobStatus& s) {
  return s.state() == v1::SUCCEEDED || s.state() == v1::FAILED ||
         s.state() == v1::CANCELLED;
}

int CountEvents(const v1::JobStatus& s, const std::string& kind) {
  int n = 0;
  for (const v1::MembershipEvent& e : s.events()) n += e.kind() == kind;
  return n;
}

}  // namespace fulcrum::testing
