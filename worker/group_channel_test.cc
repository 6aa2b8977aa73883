// The host group's channels (wire.pre_reduce) against a fake transport:
// what the leader pushes for whom, falling back when a member never
// joins, and every wait ending when the other side fails, dies, leaves or
// its deadline passes.
#include "common/status/payloads.h"
#include "worker/group_channel.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/dataplane/group_segment.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

// A 2 -> 2 MLP (6 floats) cut into partitions of at most 3 floats.
std::unique_ptr<ParameterLayout> Layout() {
  absl::StatusOr<ParameterLayout> layout = ParameterLayout::ForMlp({2, 2}, 1, 12);
  EXPECT_TRUE(layout.ok()) << layout.status();
  EXPECT_GE(layout->partitions().size(), 2u);
  return std::make_unique<ParameterLayout>(std::move(*layout));
}

struct Recorded {
  ChannelOptions options;
  std::vector<QueuedPush> pushes;
  std::vector<std::vector<MemberShare>> shares;
  std::vector<std::vector<float>> grads;  // each push's partition values
  absl::Status wait_error;                // what WaitForClock returns
};

// A transport whose shard answers at once: Open gives clock 5 (values 1),
// WaitForClock delivers every partition.
class FakeChannel : public ParameterChannel {
 public:
  FakeChannel(Recorded* r, const ParameterLayout* layout, float* params)
      : r_(r), layout_(layout), params_(params) {}
  absl::Status Initialize(const float*) override { return absl::OkStatus(); }
  absl::StatusOr<int64_t> Open() override {
    std::fill(params_, params_ + layout_->total_size(), 1.0f);
    return 5;
  }
  void Push(int32_t id, int64_t step, int64_t samples, const float* grads,
            bool stop, PushRange range) override {
    PushShares(id, step, samples, grads, stop, {});
    r_->pushes.back().range = range;
  }
  void PushShares(int32_t id, int64_t step, int64_t samples,
                  const float* grads, bool stop,
                  absl::Span<const MemberShare> shares) override {
    r_->pushes.push_back({id, step, samples, grads, stop, PushRange{}});
    r_->shares.emplace_back(shares.begin(), shares.end());
    const Partition& p = layout_->partitions()[id];
    r_->grads.emplace_back(grads + p.offset, grads + p.offset + p.size);
  }
  absl::Status WaitForClock(int64_t clock, absl::Time, bool* stop,
                            absl::FunctionRef<void(int32_t)> arrived) override {
    if (!r_->wait_error.ok()) return r_->wait_error;
    for (const Partition& p : layout_->partitions()) {
      std::fill(params_ + p.offset, params_ + p.offset + p.size,
                static_cast<float>(clock));
      arrived(p.id);
    }
    *stop = false;
    return absl::OkStatus();
  }
  void Cancel() override {}
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  Recorded* r_;
  const ParameterLayout* layout_;
  float* params_;
};

class FakeFactory : public ChannelFactory {
 public:
  std::unique_ptr<ParameterChannel> Create(ChannelOptions options,
                                           const ParameterLayout* layout,
                                           float* params) override {
    made.push_back(std::make_unique<Recorded>());
    made.back()->options = std::move(options);
    return std::make_unique<FakeChannel>(made.back().get(), layout, params);
  }
  std::vector<std::unique_ptr<Recorded>> made;
};

ChannelOptions Options(const std::string& me, const std::string& nonce) {
  ChannelOptions o;
  o.job_id = "job";
  o.worker_id = me;
  o.host_group = {{"w-0", {"c0"}}, {"w-1", {"c1"}}};
  o.group_nonce = nonce;
  o.group_join_window = absl::Seconds(10);
  return o;
}

std::string Nonce(const char* name) {
  return absl::StrCat(name, "-", getpid(), "-", absl::ToUnixNanos(absl::Now()));
}

TEST(GroupChannelTest, TheLeaderPushesTheWeightedMeanForItsMember) {
  auto layout = Layout();
  const std::string nonce = Nonce("mean");
  FakeFactory leader_transport, member_transport;
  std::vector<float> leader_params(layout->total_size()),
      member_params(layout->total_size());
  auto leader = MakeGroupChannel(Options("w-0", nonce), layout.get(),
                                 leader_params.data(), &leader_transport);
  auto member = MakeGroupChannel(Options("w-1", nonce), layout.get(),
                                 member_params.data(), &member_transport);
  absl::StatusOr<int64_t> member_open;
  std::thread t([&] { member_open = member->Open(); });
  absl::StatusOr<int64_t> leader_open = leader->Open();
  t.join();
  ASSERT_TRUE(leader_open.ok()) << leader_open.status();
  ASSERT_TRUE(member_open.ok()) << member_open.status();
  EXPECT_EQ(*member_open, 5);
  EXPECT_EQ(member_params, std::vector<float>(layout->total_size(), 1.0f));
  // The member never touched its transport; the leader's hello names it
  // with its credentials.
  EXPECT_TRUE(member_transport.made.empty());
  ASSERT_EQ(leader_transport.made.size(), 1u);
  const ChannelOptions& inner = leader_transport.made[0]->options;
  ASSERT_EQ(inner.pushes_for.size(), 1u);
  EXPECT_EQ(inner.pushes_for[0].worker_id, "w-1");
  EXPECT_EQ(inner.pushes_for[0].shard_credentials,
            std::vector<std::string>{"c1"});
  EXPECT_TRUE(inner.host_group.empty());

  // Step 5: the leader 1 sample of 2s, the member 3 samples of 6s.
  std::vector<float> g0(layout->total_size(), 2.0f),
      g1(layout->total_size(), 6.0f);
  const int n = static_cast<int>(layout->partitions().size());
  for (int32_t id = n - 1; id >= 0; --id) {  // as backward completes them
    member->Push(id, 5, 3, g1.data(), id == 0, PushRange{4, 0, 3});
    leader->Push(id, 5, 1, g0.data(), false, PushRange{2, 10, 11});
  }
  bool stop = false;
  std::vector<int32_t> member_got;
  std::thread m([&] {
    bool member_stop = false;
    EXPECT_TRUE(member
                    ->WaitForClock(6, absl::Now() + absl::Seconds(10),
                                   &member_stop,
                                   [&](int32_t id) { member_got.push_back(id); })
                    .ok());
  });
  ASSERT_TRUE(leader->WaitForClock(6, absl::Now() + absl::Seconds(10), &stop,
                                   [](int32_t) {})
                  .ok());
  m.join();
  EXPECT_EQ(member_got.size(), static_cast<size_t>(n));
  EXPECT_EQ(member_params, std::vector<float>(layout->total_size(), 6.0f));
  const Recorded& r = *leader_transport.made[0];
  ASSERT_EQ(r.pushes.size(), static_cast<size_t>(n));
  EXPECT_EQ(r.pushes[0].id, n - 1);  // the leader's order
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(r.pushes[i].samples, 4);
    for (float v : r.grads[i]) EXPECT_FLOAT_EQ(v, (1 * 2.0f + 3 * 6.0f) / 4);
    ASSERT_EQ(r.shares[i].size(), 2u);
    EXPECT_EQ(r.shares[i][0].samples, 1);
    EXPECT_EQ(r.shares[i][0].range.begin, 10);
    EXPECT_EQ(r.shares[i][1].samples, 3);
    EXPECT_EQ(r.shares[i][1].range.chunk, 4);
  }
  EXPECT_TRUE(r.pushes[n - 1].stop);  // the member's stop (partition 0)
  EXPECT_TRUE(member->Close().ok());
  EXPECT_TRUE(leader->Close().ok());
}

// A leader and a member, both opened.
struct Group {
  std::unique_ptr<ParameterLayout> layout = Layout();
  FakeFactory leader_transport, member_transport;
  std::vector<float> lp, mp;
  std::unique_ptr<ParameterChannel> leader, member;

  explicit Group(const std::string& nonce)
      : lp(layout->total_size()), mp(layout->total_size()) {
    leader = MakeGroupChannel(Options("w-0", nonce), layout.get(), lp.data(),
                              &leader_transport);
    member = MakeGroupChannel(Options("w-1", nonce), layout.get(), mp.data(),
                              &member_transport);
    std::thread t([&] { EXPECT_TRUE(member->Open().ok()); });
    EXPECT_TRUE(leader->Open().ok());
    t.join();
  }
  // Both push step 5 (gradients filled with `l` and `m`) and wait for
  // clock 6; the leader's and the member's statuses.
  std::pair<absl::Status, absl::Status> Step(float l, float m) {
    std::vector<float> gl(layout->total_size(), l), gm(layout->total_size(), m);
    for (const Partition& p : layout->partitions()) {
      member->Push(p.id, 5, 1, gm.data(), false, PushRange{});
      leader->Push(p.id, 5, 1, gl.data(), false, PushRange{});
    }
    absl::Status member_status;
    std::thread t([&] {
      bool stop;
      member_status = member->WaitForClock(6, absl::Now() + absl::Seconds(20),
                                           &stop, [](int32_t) {});
    });
    bool stop;
    absl::Status leader_status = leader->WaitForClock(
        6, absl::Now() + absl::Seconds(20), &stop, [](int32_t) {});
    t.join();
    return {leader_status, member_status};
  }
};

// As the shard fails the worker whose push is not finite, the leader fails
// the member whose gradient is not; the group re-joins without it.
TEST(GroupChannelTest, AMembersNonFiniteGradientFailsThatMemberOnly) {
  Group g(Nonce("nan"));
  auto [leader, member] = g.Step(1.0f, std::nanf(""));
  EXPECT_EQ(leader.code(), absl::StatusCode::kUnavailable) << leader;
  EXPECT_NE(leader.message().find("w-1"), std::string::npos) << leader;
  EXPECT_EQ(member.code(), absl::StatusCode::kInvalidArgument) << member;
  EXPECT_NE(member.message().find("is not finite"), std::string::npos) << member;
  EXPECT_TRUE(g.leader_transport.made[0]->pushes.empty());  // nothing sent
}

// The shard refuses an update that would overflow, naming the group's
// stream: the member with the largest element fails, the others re-join;
// when it is the leader's, the leader fails and the member re-joins.
TEST(GroupChannelTest, ARefusedUpdateFailsTheMemberWithTheLargestElement) {
  // The shard's error as it arrives: marked kRefusedUpdatePayload.
  const absl::Status unmarked = absl::InvalidArgumentError(
      "push.data of step 5: the update of partition 0 would have made values "
      "non-finite and was not applied");
  absl::Status refused = unmarked;
  refused.SetPayload(kRefusedUpdatePayload, absl::Cord("5"));
  {
    Group g(Nonce("huge-member"));
    g.leader_transport.made[0]->wait_error = refused;
    auto [leader, member] = g.Step(1.0f, 3e38f);
    EXPECT_EQ(leader.code(), absl::StatusCode::kUnavailable) << leader;
    EXPECT_EQ(member.code(), absl::StatusCode::kInvalidArgument) << member;
    EXPECT_NE(member.message().find("non-finite"), std::string::npos);
  }
  {
    Group g(Nonce("huge-leader"));
    g.leader_transport.made[0]->wait_error = refused;
    auto [leader, member] = g.Step(3e38f, 1.0f);
    EXPECT_EQ(leader.code(), absl::StatusCode::kInvalidArgument) << leader;
    EXPECT_EQ(member.code(), absl::StatusCode::kUnavailable) << member;
    EXPECT_NE(member.message().find("w-0"), std::string::npos) << member;
  }
  {
    // Without the shard's mark the message text blames nobody: the error
    // is the leader's own, although its member's element was the largest.
    Group g(Nonce("unmarked"));
    g.leader_transport.made[0]->wait_error = unmarked;
    auto [leader, member] = g.Step(1.0f, 3e38f);
    EXPECT_EQ(leader.code(), absl::StatusCode::kInvalidArgument) << leader;
    EXPECT_EQ(member.code(), absl::StatusCode::kUnavailable) << member;
  }
}

TEST(GroupChannelTest, ALeaderWhoseMemberNeverJoinsPushesAlone) {
  auto layout = Layout();
  FakeFactory transport;
  std::vector<float> params(layout->total_size());
  ChannelOptions o = Options("w-0", Nonce("alone"));
  o.group_join_window = absl::Milliseconds(200);
  auto leader = MakeGroupChannel(o, layout.get(), params.data(), &transport);
  ASSERT_TRUE(leader->Open().ok());
  ASSERT_EQ(transport.made.size(), 1u);
  EXPECT_TRUE(transport.made[0]->options.pushes_for.empty());
  std::vector<float> g(layout->total_size(), 3.0f);
  leader->Push(0, 5, 2, g.data(), false, PushRange{1, 0, 2});
  ASSERT_EQ(transport.made[0]->pushes.size(), 1u);  // straight through
  EXPECT_TRUE(transport.made[0]->shares[0].empty());
  // A member arriving after the window pushes for itself.
  FakeFactory late_transport;
  std::vector<float> late_params(layout->total_size());
  ChannelOptions late = Options("w-1", o.group_nonce);
  late.group_join_window = absl::Milliseconds(200);
  auto member =
      MakeGroupChannel(late, layout.get(), late_params.data(), &late_transport);
  ASSERT_TRUE(member->Open().ok());
  ASSERT_EQ(late_transport.made.size(), 1u);
  EXPECT_TRUE(late_transport.made[0]->options.host_group.empty());
}

TEST(GroupChannelTest, AMemberEndsItsWaitsWhenItsLeaderFailsOrDies) {
  auto layout = Layout();
  const int partitions = static_cast<int>(layout->partitions().size());
  const int64_t total = layout->total_size();
  FakeFactory transport;
  std::vector<float> params(total);
  {
    // The leader's generation ended: the member hears ABORTED.
    const std::string nonce = Nonce("aborted");
    auto leader = GroupSegment::Create(nonce, 2, partitions, total);
    ASSERT_TRUE(leader.ok());
    auto member = MakeGroupChannel(Options("w-1", nonce), layout.get(),
                                   params.data(), &transport);
    std::thread t([&] {
      absl::SleepFor(absl::Milliseconds(100));
      (*leader)->Fail(static_cast<int>(absl::StatusCode::kAborted));
    });
    EXPECT_EQ(member->Open().status().code(), absl::StatusCode::kAborted);
    t.join();
  }
  {
    // Opened, then no parameters before the deadline.
    const std::string nonce = Nonce("deadline");
    auto leader = GroupSegment::Create(nonce, 2, partitions, total);
    ASSERT_TRUE(leader.ok());
    auto member = MakeGroupChannel(Options("w-1", nonce), layout.get(),
                                   params.data(), &transport);
    std::thread t([&] {
      while ((*leader)->joined() < 2) absl::SleepFor(absl::Milliseconds(5));
      (*leader)->SetOpened(0);
    });
    ASSERT_TRUE(member->Open().ok());
    t.join();
    bool stop;
    EXPECT_EQ(member
                  ->WaitForClock(1, absl::Now() + absl::Milliseconds(100),
                                 &stop, [](int32_t) {})
                  .code(),
              absl::StatusCode::kDeadlineExceeded);
  }
  // A leader in another process that dies (SIGKILL) after opening.
  const std::string nonce = Nonce("killed");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto leader = GroupSegment::Create(nonce, 2, partitions, total);
    if (!leader.ok()) _exit(1);
    while ((*leader)->joined() < 2) absl::SleepFor(absl::Milliseconds(5));
    (*leader)->SetOpened(0);
    absl::SleepFor(absl::Milliseconds(100));
    raise(SIGKILL);
  }
  auto member = MakeGroupChannel(Options("w-1", nonce), layout.get(),
                                 params.data(), &transport);
  ASSERT_TRUE(member->Open().ok());
  bool stop;
  const absl::Time start = absl::Now();
  absl::Status s = member->WaitForClock(1, absl::Now() + absl::Seconds(30),
                                        &stop, [](int32_t) {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("w-0"), std::string::npos) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(transport.made.empty());  // never fell back: it had joined
  // The killed leader's name is left for SweepStale (its pid is gone).
  EXPECT_GE(ShmSegment::SweepStale(absl::ZeroDuration()), 0);
}

TEST(GroupChannelTest, ALeaderEndsItsWaitWhenAMemberLeaves) {
  auto layout = Layout();
  const std::string nonce = Nonce("leaves");
  FakeFactory leader_transport, member_transport;
  std::vector<float> lp(layout->total_size()), mp(layout->total_size());
  auto leader = MakeGroupChannel(Options("w-0", nonce), layout.get(),
                                 lp.data(), &leader_transport);
  auto member = MakeGroupChannel(Options("w-1", nonce), layout.get(),
                                 mp.data(), &member_transport);
  std::thread t([&] { EXPECT_TRUE(member->Open().ok()); });
  ASSERT_TRUE(leader->Open().ok());
  t.join();
  std::vector<float> g(layout->total_size(), 1.0f);
  for (const Partition& p : layout->partitions())
    leader->Push(p.id, 5, 1, g.data(), false, PushRange{});
  std::thread leave([&] {
    absl::SleepFor(absl::Milliseconds(100));
    member->Close().IgnoreError();
  });
  bool stop;
  absl::Status s = leader->WaitForClock(6, absl::Now() + absl::Seconds(30),
                                        &stop, [](int32_t) {});
  leave.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("w-1"), std::string::npos) << s;
  EXPECT_TRUE(leader_transport.made[0]->pushes.empty());  // nothing half-summed
  leader->Close().IgnoreError();
}

}  // namespace
}  // namespace fulcrum
