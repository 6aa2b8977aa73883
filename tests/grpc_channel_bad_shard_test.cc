// The worker's channel against a shard that sends nonsense about shared
// memory: each is an INTERNAL error of the channel naming what was wrong,
// never a read outside the segment or a wait past the deadline. The fake
// shard is a plain protobuf service (any peer could send these bytes).
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/net/grpc_options.h"
#include "common/tensor/layout.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"
#include "gtest/gtest.h"
#include "worker/grpc_channel.h"

namespace fulcrum {
namespace {

// Answers every stream's hello with `reply(hello)` and then waits for the
// worker to go away.
class FakeShard : public v1::ParameterServer::Service {
 public:
  using Reply = std::function<v1::StreamResponse(const v1::Hello&)>;
  explicit FakeShard(Reply reply) : reply_(std::move(reply)) {}

  grpc::Status Stream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::StreamResponse, v1::StreamRequest>* stream)
      override {
    v1::StreamRequest hello;
    if (!stream->Read(&hello)) return grpc::Status::OK;
    stream->Write(reply_(hello.hello()));
    v1::StreamRequest ignored;
    while (stream->Read(&ignored)) {
    }
    return grpc::Status::OK;
  }

 private:
  const Reply reply_;
};

// Opens a channel (one shard, one partition of 10 floats) to a fake shard
// answering with `reply`; returns Open()'s status.
absl::Status OpenAgainst(FakeShard::Reply reply, bool shared_memory) {
  FakeShard fake(std::move(reply));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  ConfigureServer(&builder);
  builder.RegisterService(&fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_GT(port, 0);
  auto layout = ParameterLayout::ForMlp({4, 2}, 1, 1 << 20);
  EXPECT_TRUE(layout.ok());
  EXPECT_EQ(layout->partitions().size(), 1u);
  std::vector<float> params(layout->total_size());
  ChannelOptions o;
  o.job_id = "job";
  o.worker_id = "w0";
  o.shard_addresses = {absl::StrCat("127.0.0.1:", port)};
  o.connect_timeout = absl::Seconds(10);
  o.reconnect_timeout = absl::Seconds(1);
  o.shared_memory = shared_memory;
  absl::Status status;
  {
    GrpcParameterChannel channel(o, &*layout, params.data());
    const absl::Time start = absl::Now();
    status = channel.Open().status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "waited for nonsense";
    channel.Cancel();
    channel.Close().IgnoreError();
  }
  server->Shutdown(std::chrono::system_clock::now());
  return status;
}

v1::StreamResponse Values(int64_t offset_bytes, bool in_segment) {
  v1::StreamResponse r;
  v1::Params* p = r.mutable_params();
  p->set_partition(0);
  p->set_version(0);
  p->set_clock(0);
  p->set_encoding(v1::ENCODING_FP32);
  if (in_segment) {
    p->mutable_shm()->set_offset(offset_bytes);
    p->mutable_shm()->set_bytes(40);
  } else {
    p->set_data(std::string(40, '\0'));
  }
  return r;
}

TEST(GrpcChannelBadShardTest, AFakeShardsValuesAreCheckedAndTheGoodOnesTaken) {
  // Control: inline values are taken (so the failures below are the
  // nonsense, not the fake).
  EXPECT_TRUE(OpenAgainst([](const v1::Hello&) { return Values(0, false); },
                          true)
                  .ok());
}

TEST(GrpcChannelBadShardTest, ParamsShmWithoutAnOfferedSegmentFails) {
  const absl::Status s = OpenAgainst(
      [](const v1::Hello& hello) {
        EXPECT_FALSE(hello.has_shm());  // shared memory off: none offered
        return Values(64, true);
      },
      false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("params.shm"), std::string::npos) << s;
}

TEST(GrpcChannelBadShardTest, ParamsShmOutsideTheParameterRegionFails) {
  for (int64_t offset : {int64_t{0}, int64_t{2}, int64_t{1} << 30}) {
    const absl::Status s = OpenAgainst(
        [offset](const v1::Hello& hello) {
          EXPECT_TRUE(hello.has_shm());  // a loopback shard: offered
          return Values(offset, true);
        },
        true);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << offset << ": " << s;
    EXPECT_NE(s.message().find("params.shm"), std::string::npos) << s;
  }
}

// Over TCP a message may carry several chunks (more[], each with its
// data): all of them are taken. A more[] whose payload is in both the
// message and the segment (or in neither, on a ring) is nonsense.
TEST(GrpcChannelBadShardTest, MoreParamsAreTakenFromTheMessageOrTheSegment) {
  auto split = [](bool also_shm) {
    return [also_shm](const v1::Hello&) {
      v1::StreamResponse r = Values(0, false);  // refused: inline
      v1::Params* more = r.add_more();
      *more = r.params();
      r.mutable_params()->set_data(std::string(16, '\0'));  // [0, 4)
      more->set_offset(4);
      more->set_data(std::string(24, '\0'));  // [4, 10)
      if (also_shm) {
        more->mutable_shm()->set_offset(0);
        more->mutable_shm()->set_bytes(24);
      }
      return r;
    };
  };
  // Only the first chunk's 4 of 10 values would leave Open waiting.
  const absl::Status ok = OpenAgainst(split(false), true);
  EXPECT_TRUE(ok.ok()) << ok;
  const absl::Status s = OpenAgainst(split(true), true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("more[]"), std::string::npos) << s;
}

}  // namespace
}  // namespace fulcrum
