// The shard's gRPC service on a loopback port: bad input on the wire gets
// the documented status code with a message naming the problem, and the
// parameters are unchanged afterwards (asserted by pulling them before and
// after).
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include "common/concurrency/deferred_calls.h"
#include "common/config/job_spec.h"
#include "common/dataplane/payload.h"
#include "common/dataplane/shm_ring.h"
#include "common/dataplane/shm_segment.h"
#include "common/net/grpc_options.h"
#include "common/net/member_credential.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/ps/service.h"

namespace fulcrum {
namespace {

// Every test runs against both ways of serving Stream: a synchronous
// handler thread per stream (param false) and the callback reactor (true).
class BadInputTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { Start(ParameterServerService::Options{}); }
  bool callback() const { return GetParam(); }

  void Start(ParameterServerService::Options options) {
    options.callback_streams = callback();
    server_.reset();  // (shut down) before the service it serves
    service_ = std::make_unique<ParameterServerService>(&shard_, options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    ConfigureServer(&builder);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_GT(port, 0);
    stub_ = v1::ParameterServer::NewStub(
        MakeChannel("127.0.0.1:" + std::to_string(port)));
    InitJob("job-1", Spec());
  }

  // The job on this one shard, members w-1 and w-2, generation 1; one
  // partition unless `partitions` says how many it got.
  void InitJob(const std::string& job_id, const v1::JobSpec& spec,
               int* partitions = nullptr) {
    v1::InitJobRequest init;
    init.set_job_id(job_id);
    *init.mutable_spec() = spec;
    init.set_num_shards(1);
    init.set_generation(1);
    init.add_workers("w-1");
    init.add_workers("w-2");
    grpc::ClientContext context;
    if (!coordinator_key_.empty())
      context.AddMetadata(kCoordinatorMetadataKey, coordinator_key_);
    v1::InitJobResponse response;
    ASSERT_TRUE(stub_->InitJob(&context, init, &response).ok());
    if (partitions != nullptr) {
      *partitions = response.partitions_size();
      return;
    }
    ASSERT_EQ(response.partitions_size(), 1);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    // Every wait's continuation ran in a scope of the call that decided it
    // (deferred_calls.h): none fell back to the background thread.
    EXPECT_EQ(DeferredCalls::unscoped(), 0);
  }

 public:
  static v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.set_name("bad-input");
    spec.mutable_model()->set_type("mlp");
    spec.mutable_model()->add_layers(8);
    spec.mutable_model()->add_layers(4);
    spec.mutable_dataset()->set_dir("/d");
    spec.mutable_optimizer()->set_lr(0.1);
    ApplyDefaults(&spec);
    return spec;
  }

  std::vector<float> Pull(const std::string& job_id = "job-1") {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(10));
    if (!coordinator_key_.empty())
      context.AddMetadata(kCoordinatorMetadataKey, coordinator_key_);
    v1::PullRequest request;
    request.set_job_id(job_id);
    auto reader = stub_->Pull(&context, request);
    std::vector<float> out;
    v1::Params p;
    while (reader->Read(&p)) {
      EXPECT_EQ(p.encoding(), v1::ENCODING_FP32);  // exports stay exact
      out.resize(p.offset() + p.data().size() / 4);
      std::memcpy(out.data() + p.offset(), p.data().data(), p.data().size());
    }
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  }

  // Opens a stream as `worker`, sends hello and then `push` (if given);
  // returns the stream's final status.
  grpc::Status Send(const std::string& job, const std::string& worker,
                    int64_t generation, const v1::Push* push) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(10));
    auto rw = stub_->Stream(&context);
    v1::StreamRequest hello;
    hello.mutable_hello()->set_job_id(job);
    hello.mutable_hello()->set_worker_id(worker);
    hello.mutable_hello()->set_generation(generation);
    rw->Write(hello);
    if (push != nullptr) {
      v1::StreamRequest r;
      *r.mutable_push() = *push;
      rw->Write(r);
    }
    rw->WritesDone();
    v1::StreamResponse ignored;
    while (rw->Read(&ignored)) {
    }
    return rw->Finish();
  }

  // Opens a stream as w-1 of job-1, sends hello (offering `segment`'s
  // name and nonce when given) and then `request`; returns the stream's
  // final status.
  grpc::Status SendOffering(const ShmSegment* segment,
                            const v1::StreamRequest& request) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(10));
    auto rw = stub_->Stream(&context);
    rw->Write(HelloOffering(segment));
    rw->Write(request);
    rw->WritesDone();
    v1::StreamResponse ignored;
    while (rw->Read(&ignored)) {
    }
    return rw->Finish();
  }

  // w-1's hello for job-1, offering `segment` (when given) and rings of
  // `ring_bytes` each (when not 0).
  static v1::StreamRequest HelloOffering(const ShmSegment* segment,
                                         int64_t ring_bytes = 0) {
    v1::StreamRequest hello;
    hello.mutable_hello()->set_job_id("job-1");
    hello.mutable_hello()->set_worker_id("w-1");
    hello.mutable_hello()->set_generation(1);
    if (segment != nullptr) {
      hello.mutable_hello()->mutable_shm()->set_name(segment->name());
      hello.mutable_hello()->mutable_shm()->set_nonce(segment->nonce());
      hello.mutable_hello()->mutable_shm()->set_ring_bytes(ring_bytes);
    }
    return hello;
  }

  static v1::Push GoodPush() {
    v1::Push p;
    p.set_partition(0);
    p.set_samples(4);
    std::vector<float> g(36, 0.5f);  // 8*4 + 4 parameters
    p.set_data(
        std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
    return p;
  }

  void ExpectRejected(const v1::Push& push, grpc::StatusCode code,
                      const std::string& text) {
    const std::vector<float> before = Pull();
    grpc::Status s = Send("job-1", "w-1", 1, &push);
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(text), std::string::npos)
        << s.error_message();
    EXPECT_EQ(Pull(), before) << "a rejected push changed the parameters";
  }

  ParameterShard shard_;
  std::string coordinator_key_;  // set: InitJob as the coordinator
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
};

TEST_P(BadInputTest, UnknownJobMemberOrGeneration) {
  EXPECT_EQ(Send("job-9", "w-1", 1, nullptr).error_code(),
            grpc::StatusCode::NOT_FOUND);
  grpc::Status s = Send("job-1", "w-7", 1, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("w-7"), std::string::npos);
  // A generation newer than the shard's: reconfiguration still under way.
  EXPECT_EQ(Send("job-1", "w-1", 2, nullptr).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // An older one: re-join.
  EXPECT_EQ(Send("job-1", "w-1", 0, nullptr).error_code(),
            grpc::StatusCode::ABORTED);
}

TEST_P(BadInputTest, BadReconfigureIsRejectedAndChangesNothing) {
  const std::vector<float> before = Pull();
  auto call = [&](const v1::ReconfigureRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::ReconfigureResponse response;
    return stub_->Reconfigure(&context, request, &response);
  };
  v1::ReconfigureRequest r;
  r.set_job_id("job-1");
  r.set_generation(2);
  r.set_align_version(-1);
  grpc::Status s = call(r);  // no workers
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("workers"), std::string::npos);
  r.add_workers("w-1");
  r.set_generation(0);
  s = call(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("generation"), std::string::npos);
  r.set_generation(2);
  r.set_restore(true);
  r.set_restore_step(-4);
  s = call(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("restore_step"), std::string::npos);
  r.set_job_id("job-9");
  EXPECT_EQ(call(r).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Pull(), before);
  // The shard still serves generation 1.
  EXPECT_EQ(Send("job-1", "w-1", 0, nullptr).error_code(),
            grpc::StatusCode::ABORTED);
}

TEST_P(BadInputTest, BadPushesAreRejectedAndChangeNothing) {
  v1::Push p = GoodPush();
  p.set_partition(5);
  ExpectRejected(p, grpc::StatusCode::INVALID_ARGUMENT, "push.partition 5");

  p = GoodPush();
  p.mutable_data()->resize(100);
  ExpectRejected(p, grpc::StatusCode::INVALID_ARGUMENT,
                 "push.data has 100 bytes, expected 144");

  p = GoodPush();
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(p.mutable_data()->data() + 8, &nan, 4);
  ExpectRejected(p, grpc::StatusCode::INVALID_ARGUMENT, "push.data element 2");

  p = GoodPush();
  float inf = std::numeric_limits<float>::infinity();
  std::memcpy(p.mutable_data()->data(), &inf, 4);
  ExpectRejected(p, grpc::StatusCode::INVALID_ARGUMENT, "not finite");

  p = GoodPush();
  p.set_step(3);
  ExpectRejected(p, grpc::StatusCode::FAILED_PRECONDITION,
                 "push.step 3 is ahead");

  p = GoodPush();
  p.set_encoding(static_cast<v1::Encoding>(9));
  ExpectRejected(p, grpc::StatusCode::INVALID_ARGUMENT,
                 "push.encoding 9 is not an encoding");

  p = GoodPush();  // 36 fp32 elements' bytes as bf16: 72 elements
  p.set_encoding(v1::ENCODING_BF16);
  ExpectRejected(p, grpc::StatusCode::INVALID_ARGUMENT,
                 "push.data has 144 bytes, expected 72");

  p = GoodPush();
  p.set_samples(-2);
  ExpectRejected(p, grpc::StatusCode::INVALID_ARGUMENT,
                 "push.samples must be in [0, 4294967296], got -2");
}

// A stream's first Params after a hello that offers `offer` (none when
// null): whether it came through the segment (params.shm) or inline.
v1::Params FirstParams(v1::ParameterServer::Stub& stub,
                       const v1::ShmOffer* offer) {
  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(10));
  auto rw = stub.Stream(&context);
  v1::StreamRequest r;
  r.mutable_hello()->set_job_id("job-1");
  r.mutable_hello()->set_worker_id("w-1");
  r.mutable_hello()->set_generation(1);
  if (offer != nullptr) *r.mutable_hello()->mutable_shm() = *offer;
  rw->Write(r);
  rw->WritesDone();
  v1::StreamResponse response;
  EXPECT_TRUE(rw->Read(&response));
  context.TryCancel();
  rw->Finish().IgnoreError();
  return response.params();
}

// Shared memory: a mapped segment carries the parameters (the first Params
// says where); a push.shm outside the gradient region, on a stream without
// a segment, or beside push.data is INVALID_ARGUMENT naming push.shm and
// changes nothing; a segment that fails a check (wrong nonce, unknown
// name) or a shard with shared memory off leaves the stream on TCP, and
// each offer is counted as mapped or refused.
TEST_P(BadInputTest, SharedMemorySegmentsAreCheckedAndRefusalsFallBackToTcp) {
  metrics::Registry registry;
  ShardMetrics metrics(registry);
  ParameterServerService::Options options;
  options.metrics = &metrics;
  TearDown();
  shard_.EndJob("job-1");
  shard_.ForgetJob("job-1");
  Start(options);
  auto counted = [&](const char* result) {
    return metrics.shm_streams.WithLabels({result}).Value();
  };
  const std::vector<float> values = Pull();
  ASSERT_EQ(values.size(), 36u);

  // Mapped: the values lie in the segment's parameter region.
  auto segment = ShmSegment::Create(144, 144);
  ASSERT_TRUE(segment.ok()) << segment.status();
  v1::ShmOffer offer;
  offer.set_name((*segment)->name());
  offer.set_nonce((*segment)->nonce());
  v1::Params p = FirstParams(*stub_, &offer);
  ASSERT_TRUE(p.has_shm());
  EXPECT_TRUE(p.data().empty());
  ASSERT_EQ(p.shm().bytes(), 144);
  ASSERT_TRUE((*segment)->Params(p.shm().offset(), 144, "test").ok());
  std::vector<float> got(36);
  std::memcpy(got.data(), (*segment)->at(p.shm().offset()), 144);
  EXPECT_EQ(got, values);
  EXPECT_EQ(counted("mapped"), 1);

  // A wrong nonce, a name that is not there: refused, values inline.
  auto other = ShmSegment::Create(144, 144);
  ASSERT_TRUE(other.ok());
  offer.set_name((*other)->name());
  offer.set_nonce(std::string(ShmSegment::kNonceBytes, 'x'));
  p = FirstParams(*stub_, &offer);
  EXPECT_FALSE(p.has_shm());
  EXPECT_EQ(p.data().size(), 144u);
  offer.set_name("/fulcrum-1-0000000000000000");
  p = FirstParams(*stub_, &offer);
  EXPECT_FALSE(p.has_shm());
  EXPECT_EQ(counted("refused"), 2);

  // push.shm without a mapped segment, beside data, outside the region.
  v1::Push push = GoodPush();
  push.clear_data();
  push.mutable_shm()->set_offset(ShmSegment::kHeaderBytes);
  push.mutable_shm()->set_bytes(144);
  ExpectRejected(push, grpc::StatusCode::INVALID_ARGUMENT,
                 "push.shm on a stream without a mapped shared-memory segment");
  for (const auto& [offset, bytes, data] :
       std::vector<std::tuple<int64_t, int64_t, bool>>{
           {ShmSegment::kHeaderBytes, 144, true},  // beside push.data
           {0, 144, false},                        // the header
           {ShmSegment::kHeaderBytes + 2, 144, false},  // unaligned
           {ShmSegment::kHeaderBytes, 1 << 20, false}}) {  // past the region
    auto seg = ShmSegment::Create(144, 144);
    ASSERT_TRUE(seg.ok());
    const std::vector<float> before = Pull();
    v1::StreamRequest r;
    *r.mutable_push() = GoodPush();
    if (!data) r.mutable_push()->clear_data();
    r.mutable_push()->mutable_shm()->set_offset(offset);
    r.mutable_push()->mutable_shm()->set_bytes(bytes);
    const grpc::Status status = SendOffering(seg->get(), r);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << offset << " " << bytes << ": " << status.error_message();
    EXPECT_NE(status.error_message().find("push.shm"), std::string::npos)
        << status.error_message();
    EXPECT_EQ(Pull(), before) << "a rejected push changed the parameters";
  }

  // The worker shrinks its segment under the shard's mapping, then pushes
  // from it: the shard read zeros (no SIGBUS: it died of it), and the
  // stream ends naming the segment. Issue 40, item 7.
  {
    auto seg = ShmSegment::Create(144, 144);
    ASSERT_TRUE(seg.ok());
    const int fd = shm_open((*seg)->name().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    const std::vector<float> before = Pull();
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(10));
    auto rw = stub_->Stream(&context);
    ASSERT_TRUE(rw->Write(HelloOffering(seg->get())));
    v1::StreamResponse first;
    ASSERT_TRUE(rw->Read(&first));
    ASSERT_TRUE(first.params().has_shm()) << "the shard mapped it";
    ASSERT_EQ(ftruncate(fd, 0), 0);
    close(fd);
    v1::StreamRequest r;
    *r.mutable_push() = GoodPush();
    r.mutable_push()->clear_data();
    r.mutable_push()->mutable_shm()->set_offset((*seg)->grad_offset());
    r.mutable_push()->mutable_shm()->set_bytes(144);
    rw->Write(r);
    rw->WritesDone();
    v1::StreamResponse ignored;
    while (rw->Read(&ignored)) {
    }
    const grpc::Status status = rw->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << status.error_message();
    EXPECT_NE(status.error_message().find("was shrunk while mapped"),
              std::string::npos)
        << status.error_message();
    EXPECT_EQ(Pull(), before) << "a zero gradient was all it could push";
  }

  // more[].shm without a mapped segment: refused before any push of the
  // message is applied. (more[] with data is a batch: applied, see
  // BatchedMessagesOverTcpAreAppliedChunkByChunk.)
  {
    v1::StreamRequest r;
    const std::vector<float> before = Pull();
    *r.mutable_push() = GoodPush();  // valid on its own, inline
    v1::Push* more = r.add_more();
    *more = GoodPush();
    more->clear_data();
    more->mutable_shm()->set_offset(0);
    more->mutable_shm()->set_bytes(144);
    const grpc::Status status = SendOffering(nullptr, r);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << status.error_message();
    EXPECT_NE(status.error_message().find("more[].shm"), std::string::npos)
        << status.error_message();
    EXPECT_EQ(Pull(), before) << "a rejected message changed the parameters";
  }

  // Shared memory off: refused, values inline.
  TearDown();
  shard_.EndJob("job-1");
  shard_.ForgetJob("job-1");
  options.shared_memory = false;
  Start(options);
  auto third = ShmSegment::Create(144, 144);
  ASSERT_TRUE(third.ok());
  offer.set_name((*third)->name());
  offer.set_nonce((*third)->nonce());
  const double refused = counted("refused");
  p = FirstParams(*stub_, &offer);
  EXPECT_FALSE(p.has_shm());
  EXPECT_EQ(p.data().size(), 144u);
  EXPECT_EQ(counted("refused"), refused + 1);
  // The metrics must outlive the service (a callback stream's end may
  // still count after its client saw the status).
  TearDown();
  server_.reset();
  service_.reset();
}

// A read that waits for a member who never pushes ends at step_timeout
// with DEADLINE_EXCEEDED naming the partition; a worker that gives up on a
// waiting read (cancels) frees the stream at once - the synchronous
// handler's condition-variable wait and the callback service's pending
// answer alike.
TEST_P(BadInputTest, AWaitingReadEndsAtTheStepTimeoutOrWhenTheWorkerCancels) {
  ParameterServerService::Options options;
  options.step_timeout = absl::Seconds(2);
  TearDown();
  shard_.EndJob("job-1");
  shard_.ForgetJob("job-1");
  Start(options);
  for (const bool cancel : {false, true}) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(10));
    auto rw = stub_->Stream(&context);
    v1::StreamRequest hello;
    hello.mutable_hello()->set_job_id("job-1");
    hello.mutable_hello()->set_worker_id("w-1");
    hello.mutable_hello()->set_generation(1);
    ASSERT_TRUE(rw->Write(hello));
    v1::StreamResponse initial;
    ASSERT_TRUE(rw->Read(&initial));
    v1::StreamRequest push;
    *push.mutable_push() = GoodPush();  // w-1's share of step 0; w-2 never
    ASSERT_TRUE(rw->Write(push));
    const absl::Time start = absl::Now();
    if (cancel) {
      absl::SleepFor(absl::Milliseconds(50));  // the read waits by now
      context.TryCancel();
      rw->Finish().IgnoreError();
      const absl::Time until = absl::Now() + absl::Seconds(5);
      while (service_->open_streams() != 0 && absl::Now() < until)
        absl::SleepFor(absl::Milliseconds(5));
      EXPECT_EQ(service_->open_streams(), 0)
          << "a cancelled waiting read still holds its stream";
      EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500))
          << "freed at the cancel, not at the step timeout";
      continue;
    }
    v1::StreamResponse more;
    EXPECT_FALSE(rw->Read(&more)) << "no answer: w-2 never pushed";
    const grpc::Status s = rw->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << s.error_message();
    EXPECT_NE(s.error_message().find("partition 0"), std::string::npos)
        << s.error_message();
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(1900));
  }
}

// Message rings (ShmOffer.ring_bytes): the shard's first message says
// `rings`, then a push goes in through the request ring and its answer
// comes out of the response ring (w-2 pushes over plain gRPC meanwhile);
// the worker's close of the request ring ends the stream with OK and the
// shard closes the response ring. Ring sizes that cannot be are
// INVALID_ARGUMENT naming hello.shm.ring_bytes.
TEST_P(BadInputTest, MessageRingsCarryTheStreamAndBadSizesAreRefused) {
  const std::vector<float> before = Pull();
  ASSERT_EQ(before.size(), 36u);
  constexpr int64_t kRing = StreamRings::kMinBytes;
  auto segment = ShmSegment::Create(2 * kRing + 144, 144);
  ASSERT_TRUE(segment.ok()) << segment.status();
  absl::StatusOr<StreamRings> rings = StreamRings::In(**segment, kRing);
  ASSERT_TRUE(rings.ok()) << rings.status();

  grpc::ClientContext context;
  SetTimeout(&context, std::chrono::seconds(20));
  auto rw = stub_->Stream(&context);
  ASSERT_TRUE(rw->Write(HelloOffering(segment->get(), kRing)));
  v1::StreamResponse first;
  ASSERT_TRUE(rw->Read(&first));
  EXPECT_TRUE(first.rings());
  ASSERT_TRUE(first.params().has_shm());

  // The gradient in its slot (after the rings), the push in the ring.
  const int64_t slot = (*segment)->grad_offset() + 2 * kRing;
  const std::vector<float> g(36, 0.5f);
  std::memcpy((*segment)->at(slot), g.data(), 144);
  v1::StreamRequest r;
  v1::Push* push = r.mutable_push();
  push->set_partition(0);
  push->set_samples(4);
  push->mutable_shm()->set_offset(slot);
  push->mutable_shm()->set_bytes(144);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  const auto never = [] { return false; };
  ASSERT_TRUE(rings->requests.Write(r, deadline, never).ok());
  // w-2's share of step 0, over gRPC: the step completes.
  const v1::Push w2 = GoodPush();
  ASSERT_TRUE(Send("job-1", "w-2", 1, &w2).ok());

  v1::StreamResponse answer;
  absl::StatusOr<bool> read = rings->responses.Read(&answer, deadline, never);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(*read);
  EXPECT_EQ(answer.params().version(), 1);
  ASSERT_TRUE(answer.params().has_shm());
  ASSERT_EQ(answer.params().shm().bytes(), 144);
  std::vector<float> got(36);
  std::memcpy(got.data(), (*segment)->at(answer.params().shm().offset()), 144);
  const std::vector<float> after = Pull();
  EXPECT_EQ(got, after);
  EXPECT_NE(after, before);

  // The worker's close: the shard ends the stream with OK and closes the
  // response ring.
  rings->requests.Close();
  read = rings->responses.Read(&answer, deadline, never);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_FALSE(*read);
  rw->WritesDone();
  v1::StreamResponse ignored;
  EXPECT_FALSE(rw->Read(&ignored));  // nothing more on gRPC
  EXPECT_TRUE(rw->Finish().ok());

  for (const int64_t bad : {kRing + 32, int64_t{64}, 2 * kRing + 4096,
                            StreamRings::kMaxBytes + 64}) {
    auto seg = ShmSegment::Create(2 * kRing + 144, 144);
    ASSERT_TRUE(seg.ok());
    grpc::ClientContext c;
    SetTimeout(&c, std::chrono::seconds(10));
    auto stream = stub_->Stream(&c);
    stream->Write(HelloOffering(seg->get(), bad));
    stream->WritesDone();
    while (stream->Read(&ignored)) {
    }
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(status.error_message().find("hello.shm.ring_bytes"),
              std::string::npos)
        << status.error_message();
  }
  EXPECT_EQ(Pull(), after);
}

// Compressed gradients are decoded exactly: the update is that of the
// bf16-rounded gradient, not of the fp32 one the worker had; bf16
// parameters arrive as the rounded fp32 master values. Two protobuf
// clients (not the worker's frames) show that any protobuf peer works.
// wire.pre_reduce: w-1's stream pushes for w-2 too once w-2's credential
// proves it may; one push with both shares completes the step.
TEST_P(BadInputTest, AGroupMemberIsAdmittedOnlyWithItsCredential) {
  SharedCredential coordinator;
  coordinator.Set("coordinator-key");
  ParameterServerService::Options options;
  options.coordinator = &coordinator;
  TearDown();
  shard_.EndJob("job-1");
  shard_.ForgetJob("job-1");
  coordinator_key_ = "coordinator-key";
  Start(options);
  const std::vector<float> before = Pull();
  auto pushed = [&](const std::string& w2_credential) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(10));
    auto rw = stub_->Stream(&context);
    v1::StreamRequest hello;
    v1::Hello* h = hello.mutable_hello();
    h->set_job_id("job-1");
    h->set_worker_id("w-1");
    h->set_generation(1);
    h->set_credential(StreamCredential("coordinator-key", "job-1", "w-1"));
    v1::GroupMember* w2 = h->add_group();
    w2->set_worker_id("w-2");
    w2->set_credential(w2_credential);
    rw->Write(hello);
    v1::StreamRequest push;
    *push.mutable_push() = GoodPush();
    push.mutable_push()->add_shares()->set_samples(1);
    push.mutable_push()->add_shares()->set_samples(3);
    rw->Write(push);
    int64_t newest = -1;
    v1::StreamResponse response;
    while (newest < 1 && rw->Read(&response))
      newest = std::max(newest, response.params().version());
    rw->WritesDone();
    while (rw->Read(&response)) {
    }
    grpc::Status s = rw->Finish();
    return std::make_pair(s, newest);
  };
  auto [forged, forged_version] = pushed("forged");
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << forged.error_message();
  EXPECT_NE(forged.error_message().find("w-2"), std::string::npos)
      << forged.error_message();
  EXPECT_EQ(Pull(), before);
  auto [ok, version] =
      pushed(StreamCredential("coordinator-key", "job-1", "w-2"));
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(version, 1);  // no push of w-2's own was needed
  EXPECT_NE(Pull(), before);
}

TEST_P(BadInputTest, Bf16GradientsAndParametersOnTheWire) {
  v1::JobSpec spec = Spec();
  spec.mutable_wire()->set_gradients(v1::ENCODING_BF16);
  spec.mutable_wire()->set_parameters(v1::ENCODING_BF16);
  InitJob("job-2", spec);
  const std::vector<float> before = Pull("job-2");
  std::vector<float> g(36);
  std::vector<uint16_t> wire(36);
  for (int i = 0; i < 36; ++i) {
    // A quarter of bf16's spacing above a bf16 value: the rounding shows.
    g[i] = Bf16ToFloat(FloatToBf16(0.3f + 0.01f * i)) * (1.0f + 0x1p-9f);
    wire[i] = FloatToBf16(g[i]);
  }
  v1::Push push;
  push.set_partition(0);
  push.set_samples(4);
  push.set_encoding(v1::ENCODING_BF16);
  push.set_data(std::string(reinterpret_cast<const char*>(wire.data()), 72));
  // Each member: hello, then the first parameters (bf16), the push, then
  // the next version (bf16).
  auto member = [&](const std::string& worker, std::vector<float>* first,
                    std::vector<float>* next) {
    grpc::ClientContext context;
    SetTimeout(&context, std::chrono::seconds(20));
    auto rw = stub_->Stream(&context);
    v1::StreamRequest r;
    r.mutable_hello()->set_job_id("job-2");
    r.mutable_hello()->set_worker_id(worker);
    r.mutable_hello()->set_generation(1);
    rw->Write(r);
    *r.mutable_push() = push;
    rw->Write(r);
    rw->WritesDone();
    v1::StreamResponse response;
    for (std::vector<float>* out : {first, next}) {
      if (!rw->Read(&response)) break;
      const v1::Params& p = response.params();
      EXPECT_EQ(p.encoding(), v1::ENCODING_BF16);
      out->resize(p.data().size() / 2);
      for (size_t i = 0; i < out->size(); ++i) {
        uint16_t h;
        std::memcpy(&h, p.data().data() + 2 * i, 2);
        (*out)[i] = Bf16ToFloat(h);
      }
    }
    EXPECT_TRUE(rw->Finish().ok());
  };
  std::vector<float> first1, next1, first2, next2;
  std::thread other([&] { member("w-2", &first2, &next2); });
  member("w-1", &first1, &next1);
  other.join();
  const std::vector<float> after = Pull("job-2");
  ASSERT_EQ(after.size(), 36u);
  ASSERT_EQ(first1.size(), 36u);
  ASSERT_EQ(next1.size(), 36u);
  for (int i = 0; i < 36; ++i) {
    // Both members pushed the same gradient: the average is its bf16 value.
    const float applied = (before[i] - after[i]) / 0.1f;
    EXPECT_NEAR(applied, Bf16ToFloat(wire[i]), 2e-5f) << i;
    EXPECT_GT(std::fabs(applied - g[i]), 1e-4f) << i << ": fp32 applied";
    EXPECT_EQ(first1[i], Bf16ToFloat(FloatToBf16(before[i])));
    EXPECT_EQ(next1[i], Bf16ToFloat(FloatToBf16(after[i])));
    EXPECT_EQ(next2[i], next1[i]);
  }
}

// Over TCP a message carries several chunks: a worker's pushes (more[],
// each with its data) and the shard's answers (several partitions a
// message). Applied as if each had come alone: the same parameters as a
// job whose pushes came one a message.
TEST_P(BadInputTest, BatchedMessagesOverTcpAreAppliedChunkByChunk) {
  v1::JobSpec spec = Spec();
  spec.mutable_model()->clear_layers();
  spec.mutable_model()->add_layers(64);
  spec.mutable_model()->add_layers(8);
  spec.set_partition_bytes(1024);
  int partitions = 0;
  InitJob("batched", spec, &partitions);
  ASSERT_GE(partitions, 3);
  int again = 0;
  InitJob("single", spec, &again);
  ASSERT_EQ(again, partitions);
  ASSERT_EQ(Pull("batched"), Pull("single"));
  const std::vector<float> before = Pull("batched");

  // Every partition's values a member received at `version`, and how many
  // of its messages carried more than one partition.
  struct Received {
    std::map<int32_t, std::vector<float>> at[2];
    int batched_messages = 0;
  };
  auto run = [&](const std::string& job, bool batch, Received got[2]) {
    grpc::ClientContext contexts[2];
    std::unique_ptr<grpc::ClientReaderWriter<v1::StreamRequest,
                                             v1::StreamResponse>>
        rws[2];
    // Reads until every partition arrived at `version`.
    auto read = [&](int m, int version) {
      v1::StreamResponse r;
      while (static_cast<int>(got[m].at[version].size()) < partitions &&
             rws[m]->Read(&r)) {
        if (r.more_size() > 0) ++got[m].batched_messages;
        std::vector<v1::Params> all = {r.params()};
        all.insert(all.end(), r.more().begin(), r.more().end());
        for (const v1::Params& p : all) {
          EXPECT_EQ(p.version(), version);
          std::vector<float>& v = got[m].at[version][p.partition()];
          v.resize(p.offset() + p.data().size() / 4);
          std::memcpy(v.data() + p.offset(), p.data().data(),
                      p.data().size());
        }
      }
      ASSERT_EQ(static_cast<int>(got[m].at[version].size()), partitions);
    };
    for (int m = 0; m < 2; ++m) {
      SetTimeout(&contexts[m], std::chrono::seconds(20));
      rws[m] = stub_->Stream(&contexts[m]);
      v1::StreamRequest hello;
      hello.mutable_hello()->set_job_id(job);
      hello.mutable_hello()->set_worker_id(m == 0 ? "w-1" : "w-2");
      hello.mutable_hello()->set_generation(1);
      ASSERT_TRUE(rws[m]->Write(hello));
      read(m, 0);
    }
    for (int m = 0; m < 2; ++m) {
      v1::StreamRequest r;
      for (const auto& [id, values] : got[m].at[0]) {
        std::vector<float> g(values.size());
        for (size_t i = 0; i < g.size(); ++i)
          g[i] = 0.01f * static_cast<float>((m + 1) * (id + 1)) -
                 0.001f * static_cast<float>(i % 7);
        v1::Push* push = r.has_push() ? r.add_more() : r.mutable_push();
        push->set_partition(id);
        push->set_samples(4 + m);
        push->set_data(std::string(reinterpret_cast<const char*>(g.data()),
                                   g.size() * 4));
        if (!batch) {
          ASSERT_TRUE(rws[m]->Write(r));
          r.Clear();
        }
      }
      if (batch) {
        ASSERT_EQ(r.more_size(), partitions - 1);
        ASSERT_TRUE(rws[m]->Write(r));
      }
    }
    for (int m = 0; m < 2; ++m) {
      read(m, 1);
      rws[m]->WritesDone();
      v1::StreamResponse ignored;
      while (rws[m]->Read(&ignored)) {
      }
      const grpc::Status s = rws[m]->Finish();
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
  };
  Received batched[2], single[2];
  run("batched", true, batched);
  run("single", false, single);
  const std::vector<float> after = Pull("batched");
  EXPECT_NE(after, before);
  EXPECT_EQ(after, Pull("single"));
  for (int m = 0; m < 2; ++m) {
    EXPECT_EQ(batched[m].at[1], single[m].at[1]);
    // The answers to one read: the shard batched them.
    EXPECT_GT(batched[m].batched_messages, 0) << m;
  }
}

TEST_P(BadInputTest, BadInitJobNamesTheField) {
  v1::InitJobRequest init;
  init.set_job_id("job-2");
  *init.mutable_spec() = Spec();
  init.mutable_spec()->mutable_optimizer()->set_lr(-1);
  init.set_num_shards(1);
  init.set_generation(1);
  init.add_workers("w-1");
  grpc::ClientContext context;
  v1::InitJobResponse response;
  grpc::Status s = stub_->InitJob(&context, init, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "optimizer.lr must be > 0, got -1");
}

// A flood of idle (no hello) and half-open (hello, then silence) streams
// while two members train: at most max_streams are served, the rest are
// RESOURCE_EXHAUSTED at once; idle ones are closed at the hello deadline,
// silent ones at the idle deadline, and the members train throughout.
class FloodTest : public BadInputTest {
 protected:
  void SetUp() override {
    ParameterServerService::Options o;
    o.max_streams = 20;
    // Margins for a loaded machine: the 40 streams open well within the
    // hello deadline, and the members' pauses stay well within the idle one.
    o.hello_timeout = absl::Seconds(3);
    o.idle_timeout = absl::Seconds(6);
    Start(o);
  }
  using Stream = grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>;
  struct Open {
    std::unique_ptr<grpc::ClientContext> context =
        std::make_unique<grpc::ClientContext>();
    std::unique_ptr<Stream> rw;
  };
  Open Connect() {
    Open o;
    SetTimeout(o.context.get(), std::chrono::seconds(30));
    o.rw = stub_->Stream(o.context.get());
    return o;
  }
  // A member's stream: hello, then the initial parameters.
  Open Member(const std::string& worker) {
    Open o = Connect();
    v1::StreamRequest hello;
    hello.mutable_hello()->set_job_id("job-1");
    hello.mutable_hello()->set_worker_id(worker);
    hello.mutable_hello()->set_generation(1);
    EXPECT_TRUE(o.rw->Write(hello));
    v1::StreamResponse initial;
    EXPECT_TRUE(o.rw->Read(&initial));
    return o;
  }
  // Both members push `step`; each reads version step + 1.
  void Step(Open& a, Open& b, int64_t step) {
    for (Open* m : {&a, &b}) {
      v1::StreamRequest r;
      *r.mutable_push() = GoodPush();
      r.mutable_push()->set_step(step);
      ASSERT_TRUE(m->rw->Write(r));
    }
    for (Open* m : {&a, &b}) {
      v1::StreamResponse got;
      ASSERT_TRUE(m->rw->Read(&got));
      EXPECT_EQ(got.params().version(), step + 1);
    }
  }
  bool WaitForOpen(int n) {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (service_->open_streams() != n && absl::Now() < until)
      absl::SleepFor(absl::Milliseconds(10));
    return service_->open_streams() == n;
  }
};

TEST_P(FloodTest, IdleAndHalfOpenStreamsAreBoundedAndClosedWhileAJobTrains) {
  Open a = Member("w-1"), b = Member("w-2");
  Step(a, b, 0);
  std::vector<Open> flood;
  for (int i = 0; i < 40; ++i) flood.push_back(Connect());
  ASSERT_TRUE(WaitForOpen(20)) << service_->open_streams();
  Step(a, b, 1);  // the members train while the flood is held
  int refused = 0, closed = 0;
  for (Open& f : flood) {  // refused at once, or closed at the hello deadline
    const grpc::Status s = f.rw->Finish();
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_NE(s.error_message().find("--max_streams"), std::string::npos)
          << s.error_message();
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED)
          << s.error_message();
      ++closed;
    }
  }
  EXPECT_EQ(refused, 22);
  EXPECT_EQ(closed, 18);
  ASSERT_TRUE(WaitForOpen(2)) << "the idle streams' threads are free again";
  Step(a, b, 2);
  // Half-open: the members fall silent past the idle deadline.
  absl::SleepFor(absl::Seconds(7));
  ASSERT_TRUE(WaitForOpen(0));
  v1::StreamResponse more;
  EXPECT_FALSE(a.rw->Read(&more));
  EXPECT_EQ(a.rw->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(b.rw->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // A member comes back and is served.
  Open again = Member("w-1");
  EXPECT_TRUE(WaitForOpen(1));
  again.context->TryCancel();
  again.rw->Finish().IgnoreError();
}

std::string ServiceName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Callback" : "Sync";
}
INSTANTIATE_TEST_SUITE_P(Streams, BadInputTest, ::testing::Bool(),
                         ServiceName);
INSTANTIATE_TEST_SUITE_P(Streams, FloodTest, ::testing::Bool(), ServiceName);

}  // namespace
}  // namespace fulcrum
