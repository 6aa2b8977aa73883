// What `fulcrumctl status` shows of a job: its status with what the
// members reported merged in - rank 0's progress, the samples/s of every
// worker, live and preparing workers, complete checkpoints (steps every
// shard index has), per-epoch samples from the ledger, stalls, and the
// staleness of every shard's reads. A pure function of the job and the
// registry.
#ifndef FULCRUM_SERVER_COORDINATOR_JOB_STATUS_VIEW_H_
#define FULCRUM_SERVER_COORDINATOR_JOB_STATUS_VIEW_H_

#include "fulcrum/v1/coordinator.pb.h"
#include "server/coordinator/job.h"
#include "server/coordinator/member_registry.h"

namespace fulcrum {

v1::JobStatus JobStatusView(const Job& job, const MemberRegistry& members);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_JOB_STATUS_VIEW_H_
