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

// What the job trained: its workers' reported samples, and per epoch from
// the shards' ledger (capped, CapEpochs) into s; Finish keeps them, the view
// shows them.
int64_t SamplesTrained(const Job& job);
void FillEpochs(const Job& job, v1::JobStatus* s);

// A status lists at most this many epochs; the earlier ones are summed.
inline constexpr int kMaxListedEpochs = 100;
// Keeps the newest `max_listed` of s->epochs() and adds the others to
// s->earlier_epochs() (so a status stays bounded however many epochs a job
// has).
void CapEpochs(v1::JobStatus* s, int max_listed = kMaxListedEpochs);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_JOB_STATUS_VIEW_H_
