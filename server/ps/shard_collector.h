// What a scrape of the shard's /metrics reads from its state: the number of
// jobs, each embedding table's rows, bytes and totals, and the wait
// continuations that ran without a scope (DeferredCalls::unscoped).
#ifndef FULCRUM_SERVER_PS_SHARD_COLLECTOR_H_
#define FULCRUM_SERVER_PS_SHARD_COLLECTOR_H_

#include "server/ps/parameter_shard.h"
#include "server/ps/shard_metrics.h"

namespace fulcrum {

// Neither is owned. Safe to call concurrently with everything else.
void CollectShardState(const ParameterShard& shard, ShardMetrics* metrics);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_SHARD_COLLECTOR_H_
