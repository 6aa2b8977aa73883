// Local pre-reduction (wire.pre_reduce) as ParameterChannels that wrap a
// transport's: the members of a generation on one host (the assignment's
// host_group, rank order) share one GroupSegment (group_segment.h). The
// first is the group's leader: it opens the only streams to the shards,
// naming the others in its hello (ChannelOptions::pushes_for), sums the
// group's gradients of each partition weighted by their samples and pushes
// the sum with each member's share (PushShares), and hands the parameters
// it receives back through the segment. So a shard receives one stream per
// host instead of one per worker, and computes the same update.
//
// A member that cannot join the group (no segment within
// options.group_join_window,
// admission closed, another /dev/shm) trains over its own streams; the
// leader pushes only for the members that joined. A member whose leader
// dies or fails ends its waits with UNAVAILABLE (or the leader's code:
// ABORTED when the generation ended), the leader whose member dies or
// leaves with UNAVAILABLE - each re-joins as after any lost stream, and
// every wait is bounded by its deadline.
//
// Thread safety: as ParameterChannel's.
#ifndef FULCRUM_WORKER_GROUP_CHANNEL_H_
#define FULCRUM_WORKER_GROUP_CHANNEL_H_

#include <memory>

#include "common/dataplane/parameter_channel.h"

namespace fulcrum {

// The channel for `options`: the transport's own (`factory`, not owned)
// when options.host_group is empty, else the group leader's or member's.
std::unique_ptr<ParameterChannel> MakeGroupChannel(ChannelOptions options,
                                                   const ParameterLayout* layout,
                                                   float* params,
                                                   ChannelFactory* factory);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_GROUP_CHANNEL_H_
