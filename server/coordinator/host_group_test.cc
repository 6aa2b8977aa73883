// wire.pre_reduce on the coordinator: each member learns the members of its
// generation registered with its hostname (rank order, the leader first),
// only when there are two or more and the job asks; the leader alone gets
// its peers' shard credentials, and the group one nonce, made from the
// coordinator's secret.
#include <map>

#include "common/concurrency/executor.h"
#include "common/dataplane/host_id.h"
#include "common/net/member_credential.h"
#include "common/testing/fault_injection_env.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator_core.h"
#include "server/coordinator/service.h"
#include "server/coordinator/testing/fake_shards.h"
#include "server/coordinator/testing/test_specs.h"

namespace fulcrum {
namespace {

// A coordinator on a fake clock whose shard calls complete inline.
struct TestCoordinator {
  TestCoordinator() : c(Options(), &shards) {}
  Coordinator::Options Options() {
    Coordinator::Options o;
    o.env = &env;
    o.executor = &executor;
    return o;
  }
  testing::FaultInjectionEnv env;
  InlineExecutor executor;
  testing::FakeShards shards;
  Coordinator c;
};

// The assignments of a running job of workers on `hosts` (by worker id),
// registered with `host_ids` when given (one per host).
std::map<std::string, v1::WorkerAssignment> Assignments(
    const std::vector<std::string>& hosts, bool pre_reduce,
    std::vector<std::string>* ids,
    const std::vector<std::string>& host_ids = {}) {
  TestCoordinator t;
  Coordinator& c = t.c;
  v1::JobSpec spec = testing::TinySpec(static_cast<int>(hosts.size()),
                                       static_cast<int>(hosts.size()), 1);
  spec.mutable_wire()->set_pre_reduce(pre_reduce);
  EXPECT_TRUE(c.SubmitJob(spec).ok());
  for (size_t i = 0; i < hosts.size(); ++i) {
    v1::RegisterWorkerRequest r = testing::WorkerOn(hosts[i]);
    if (!host_ids.empty()) r.set_host_id(host_ids[i]);
    ids->push_back(c.RegisterWorker(r)->worker_id());
  }
  v1::RegisterShardRequest shard;
  shard.set_address("127.0.0.1:1");
  EXPECT_TRUE(c.RegisterShard(shard).ok());
  c.Tick();
  std::map<std::string, v1::WorkerAssignment> out;
  for (const std::string& id : *ids) {
    v1::WorkerHeartbeatRequest beat;
    beat.set_worker_id(id);
    out[id] = c.WorkerHeartbeat(beat)->assignment();
    EXPECT_EQ(out[id].generation(), 1) << id;
  }
  return out;
}

std::vector<std::string> Group(const v1::WorkerAssignment& a) {
  std::vector<std::string> ids;
  for (const v1::HostPeer& p : a.host_group()) ids.push_back(p.worker_id());
  return ids;
}

TEST(HostGroupTest, MembersOnOneHostFormAGroupInRankOrder) {
  std::vector<std::string> ids;
  auto a = Assignments({"a", "b", "a", "a"}, true, &ids);
  // Ranks follow the members' order; the group is the host's members.
  const std::vector<std::string> on_a = {ids[0], ids[2], ids[3]};
  for (const std::string& id : on_a) EXPECT_EQ(Group(a[id]), on_a) << id;
  EXPECT_EQ(a[ids[0]].rank(), 0);
  // Alone on host b: no group.
  EXPECT_EQ(a[ids[1]].host_group_size(), 0);

  std::vector<std::string> off_ids;
  auto off = Assignments({"a", "a"}, false, &off_ids);
  for (const std::string& id : off_ids)
    EXPECT_EQ(off[id].host_group_size(), 0) << "pre_reduce is off";
}

// Two machines with one hostname (cloned VMs, containers with a fixed
// name) are two hosts: a group forms by host_id (the boot id and the
// /dev/shm mount), not by name. A worker with no host_id falls back to its
// hostname.
TEST(HostGroupTest, AGroupIsTheWorkersOfOneHostIdNotOfOneHostname) {
  std::vector<std::string> ids;
  auto a = Assignments({"clone", "clone", "clone", "clone"}, true, &ids,
                       {"boot-1/5:1", "boot-2/5:1", "boot-1/5:1", ""});
  const std::vector<std::string> machine1 = {ids[0], ids[2]};
  EXPECT_EQ(Group(a[ids[0]]), machine1);
  EXPECT_EQ(Group(a[ids[2]]), machine1);
  EXPECT_EQ(a[ids[1]].host_group_size(), 0) << "same name, another machine";
  EXPECT_EQ(a[ids[3]].host_group_size(), 0) << "no host_id: by hostname";
}

// A host_id past the bound is refused, naming the field.
TEST(HostGroupTest, AnOverlongHostIdIsRefused) {
  TestCoordinator t;
  Coordinator& c = t.c;
  v1::RegisterWorkerRequest bad = testing::WorkerOn("clone");
  bad.set_host_id(std::string(kMaxHostIdBytes + 1, 'x'));
  auto refused = c.RegisterWorker(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("host_id"), std::string::npos);
  EXPECT_TRUE(c.ListMembers().empty());
}

TEST(HostGroupTest, TheLeaderAloneGetsItsPeersCredentials) {
  std::vector<std::string> ids;
  auto a = Assignments({"a", "a"}, true, &ids);
  const MemberSecret secret = MemberSecret::Random();
  v1::WorkerAssignment leader = a[ids[0]], member = a[ids[1]];
  AddShardCredentials(&secret, ids[0], &leader);
  AddShardCredentials(&secret, ids[1], &member);
  ASSERT_EQ(leader.shard_credentials_size(), 1);
  ASSERT_EQ(leader.host_group_size(), 2);
  // The leader can prove each peer to the shard, as the peer itself could.
  EXPECT_EQ(leader.host_group(1).shard_credentials(0),
            member.shard_credentials(0));
  EXPECT_EQ(leader.host_group(0).shard_credentials(0),
            leader.shard_credentials(0));
  for (const v1::HostPeer& p : member.host_group())
    EXPECT_EQ(p.shard_credentials_size(), 0) << "only the leader's copy";
  // One nonce for the group, from the secret: another coordinator's differs.
  EXPECT_FALSE(leader.group_nonce().empty());
  EXPECT_EQ(leader.group_nonce(), member.group_nonce());
  const MemberSecret other = MemberSecret::Random();
  v1::WorkerAssignment elsewhere = a[ids[1]];
  AddShardCredentials(&other, ids[1], &elsewhere);
  EXPECT_NE(elsewhere.group_nonce(), member.group_nonce());
}

}  // namespace
}  // namespace fulcrum
