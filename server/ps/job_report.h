// What a shard tells the coordinator about one of its jobs with every
// heartbeat: stalled sync steps, checkpoint steps on disk, the data ledger
// (partition 0's shard) and the staleness of its reads.
#ifndef FULCRUM_SERVER_PS_JOB_REPORT_H_
#define FULCRUM_SERVER_PS_JOB_REPORT_H_

#include <string>

#include "absl/time/time.h"
#include "fulcrum/v1/coordinator.pb.h"
#include "server/ps/job_shard.h"

namespace fulcrum {

// The report of `job` on the shard `shard_id`; steps stalled longer than
// `stall_threshold` are listed.
v1::ShardJobStats JobReport(JobShard& job, const std::string& shard_id,
                            absl::Duration stall_threshold);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_JOB_REPORT_H_
