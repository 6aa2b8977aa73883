#include "common/dataplane/grpc_frames.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string Bytes(grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as a ByteBuffer cut into slices at `cuts`.
grpc::ByteBuffer Cut(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  cuts.push_back(bytes.size());
  for (size_t c : cuts) {
    slices.emplace_back(bytes.data() + at, c - at);
    at = c;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Collect(const Payload& p) {
  std::string out;
  p.ForEachPiece([&](const char* d, size_t n) { out.append(d, n); });
  return out;
}

v1::StreamRequest APush() {
  v1::StreamRequest r;
  v1::Push* p = r.mutable_push();
  p->set_step(41);
  p->set_partition(3);
  p->set_offset(1024);
  p->set_encoding(v1::ENCODING_BF16);
  p->set_samples(64);
  p->set_stop(true);
  p->mutable_range()->set_chunk(7);
  p->mutable_range()->set_end(9);
  // A pre-reduced push's shares (here beside a range only to cover both).
  p->add_shares()->set_samples(40);
  v1::Share* share = p->add_shares();
  share->set_samples(24);
  share->mutable_range()->set_chunk(3);
  share->mutable_range()->set_end(24);
  return r;
}

TEST(GrpcFramesTest, AnOutOfLinePushIsTheProtobufMessageOnTheWire) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  SlicePins pins;
  RequestFrame frame;
  frame.message = APush();
  frame.out = data.data();
  frame.out_bytes = data.size();
  frame.pins = &pins;
  {
    grpc::ByteBuffer bb;
    ASSERT_TRUE(SerializeFrame(frame, &bb).ok());
    EXPECT_EQ(pins.outstanding(), 1);
    v1::StreamRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(Bytes(bb)));
    v1::StreamRequest expected = APush();
    expected.mutable_push()->set_data(data);
    EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
  }
  EXPECT_EQ(pins.outstanding(), 0);  // gRPC let go: the owner may reuse
  EXPECT_TRUE(pins.WaitUntilReleased(absl::Now()));
}

TEST(GrpcFramesTest, AProtobufPushParsesWithItsDataLeftInTheSlices) {
  v1::StreamRequest sent = APush();
  std::string data(301, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i);
  sent.mutable_push()->set_data(data);
  const std::string bytes = sent.SerializeAsString();
  for (size_t a = 0; a <= bytes.size(); a += 13) {
    for (size_t b = a; b <= bytes.size(); b += 29) {
      grpc::ByteBuffer bb = Cut(bytes, {a, b});
      RequestFrame frame;
      ASSERT_TRUE(ParseFrame(&bb, &frame).ok()) << a << " " << b;
      EXPECT_EQ(Collect(frame.data), data);
      EXPECT_EQ(frame.data.encoding(), WireEncoding::kBf16);
      v1::StreamRequest header = sent;
      header.mutable_push()->clear_data();
      ASSERT_EQ(frame.message.SerializeAsString(), header.SerializeAsString());
    }
  }
}

// A sparse push (wire.topk): its indices travel in the message, cut
// anywhere between slices, and come back whole beside the data.
TEST(GrpcFramesTest, ASparsePushKeepsItsIndices) {
  v1::StreamRequest sent = APush();
  std::string indices;
  for (uint32_t i : {3u, 70u, 1000u, 65537u}) {
    indices.append(reinterpret_cast<const char*>(&i), 4);
  }
  sent.mutable_push()->set_indices(indices);
  sent.mutable_push()->set_data(std::string(8, 'v'));
  const std::string bytes = sent.SerializeAsString();
  for (size_t a = 0; a <= bytes.size(); a += 5) {
    grpc::ByteBuffer bb = Cut(bytes, {a});
    RequestFrame frame;
    ASSERT_TRUE(ParseFrame(&bb, &frame).ok()) << a;
    EXPECT_EQ(frame.message.push().indices(), indices) << a;
    EXPECT_EQ(Collect(frame.data), std::string(8, 'v'));
  }
  // Sent out of line, as the channel does: the same bytes on the wire.
  RequestFrame frame;
  frame.message = sent;
  frame.message.mutable_push()->clear_data();
  const std::string data(8, 'v');
  frame.out = data.data();
  frame.out_bytes = data.size();
  grpc::ByteBuffer bb;
  ASSERT_TRUE(SerializeFrame(frame, &bb).ok());
  v1::StreamRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Bytes(bb)));
  EXPECT_EQ(parsed.push().indices(), indices);
  EXPECT_EQ(parsed.push().data(), data);
}

TEST(GrpcFramesTest, HelloAndParamsRoundTrip) {
  RequestFrame hello;
  hello.message.mutable_hello()->set_job_id("job-1");
  hello.message.mutable_hello()->set_worker_id("w-2");
  hello.message.mutable_hello()->set_generation(5);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(SerializeFrame(hello, &bb).ok());
  RequestFrame got;
  ASSERT_TRUE(ParseFrame(&bb, &got).ok());
  EXPECT_EQ(got.message.hello().worker_id(), "w-2");
  EXPECT_EQ(got.message.hello().generation(), 5);
  EXPECT_EQ(got.data.bytes(), 0u);

  ResponseFrame out;
  v1::Params* p = out.message.mutable_params();
  p->set_partition(2);
  p->set_version(9);
  p->set_offset(256);
  p->set_clock(9);
  p->set_encoding(v1::ENCODING_FP32);
  const float values[3] = {1.5f, -2.0f, 3.25f};
  std::memcpy(out.Reserve(sizeof(values)), values, sizeof(values));
  ASSERT_TRUE(SerializeFrame(out, &bb).ok());
  v1::StreamResponse as_proto;
  ASSERT_TRUE(as_proto.ParseFromString(Bytes(bb)));
  EXPECT_EQ(as_proto.params().data(),
            std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  ResponseFrame in;
  ASSERT_TRUE(ParseFrame(&bb, &in).ok());
  EXPECT_EQ(in.message.params().version(), 9);
  EXPECT_EQ(in.message.params().offset(), 256);
  float back[3];
  Decode(in.data, back);
  EXPECT_EQ(back[2], 3.25f);
}

// Shared memory batches: more[] pushes and parameters travel after the
// first, are plain protobuf on the wire, and may not carry data.
TEST(GrpcFramesTest, BatchedPushesAndParamsRoundTrip) {
  RequestFrame out;
  out.message = APush();
  out.message.mutable_push()->mutable_shm()->set_offset(64);
  out.message.mutable_push()->mutable_shm()->set_bytes(128);
  for (int i = 0; i < 2; ++i) {
    v1::Push* more = out.message.add_more();
    more->set_partition(4 + i);
    more->mutable_shm()->set_offset(1024 * (i + 1));
    more->mutable_shm()->set_bytes(16);
  }
  grpc::ByteBuffer bb;
  ASSERT_TRUE(SerializeFrame(out, &bb).ok());
  v1::StreamRequest as_proto;
  ASSERT_TRUE(as_proto.ParseFromString(Bytes(bb)));
  EXPECT_EQ(as_proto.more_size(), 2);
  EXPECT_EQ(as_proto.push().shm().bytes(), 128);
  RequestFrame in;
  ASSERT_TRUE(ParseFrame(&bb, &in).ok());
  EXPECT_EQ(in.message.push().step(), 41);
  EXPECT_EQ(in.message.push().shm().offset(), 64);
  ASSERT_EQ(in.message.more_size(), 2);
  EXPECT_EQ(in.message.more(1).partition(), 5);
  EXPECT_EQ(in.message.more(1).shm().offset(), 2048);
  EXPECT_EQ(in.data.bytes(), 0u);

  ResponseFrame params;
  params.message.mutable_params()->set_partition(1);
  params.message.mutable_params()->mutable_shm()->set_bytes(8);
  params.message.add_more()->set_partition(2);
  params.message.add_more()->set_partition(3);
  ASSERT_TRUE(SerializeFrame(params, &bb).ok());
  ResponseFrame got;
  ASSERT_TRUE(ParseFrame(&bb, &got).ok());
  EXPECT_EQ(got.message.params().partition(), 1);
  EXPECT_EQ(got.message.params().shm().bytes(), 8);
  ASSERT_EQ(got.message.more_size(), 2);
  EXPECT_EQ(got.message.more(1).partition(), 3);
  EXPECT_FALSE(got.message.rings());

  // `rings` (the shard's first message on a stream that takes them), as
  // protobuf writes it and back; a reused frame forgets it.
  params.message.set_rings(true);
  ASSERT_TRUE(SerializeFrame(params, &bb).ok());
  v1::StreamResponse response_proto;
  ASSERT_TRUE(response_proto.ParseFromString(Bytes(bb)));
  EXPECT_TRUE(response_proto.rings());
  EXPECT_EQ(response_proto.more_size(), 2);
  ASSERT_TRUE(ParseFrame(&bb, &got).ok());
  EXPECT_TRUE(got.message.rings());
  EXPECT_EQ(got.message.params().partition(), 1);
  params.message.clear_rings();
  ASSERT_TRUE(SerializeFrame(params, &bb).ok());
  ASSERT_TRUE(ParseFrame(&bb, &got).ok());
  EXPECT_FALSE(got.message.rings());

  // Reused frames start empty.
  out.message.clear_more();
  ASSERT_TRUE(SerializeFrame(out, &bb).ok());
  ASSERT_TRUE(ParseFrame(&bb, &in).ok());
  EXPECT_EQ(in.message.more_size(), 0);

  // Payload bytes in more[] are refused: they go through the segment.
  params.message.mutable_more(0)->set_data("abcd");
  EXPECT_EQ(SerializeFrame(params, &bb).error_code(),
            grpc::StatusCode::INTERNAL);
  out.message.add_more()->set_data("abcd");
  EXPECT_EQ(SerializeFrame(out, &bb).error_code(), grpc::StatusCode::INTERNAL);
}

// Over TCP a batch's chunks travel in one message too: each more[] with
// its payload out of line, the protobuf message on the wire, read back
// without copies, each in its own encoding.
TEST(GrpcFramesTest, BatchedPayloadsTravelOutOfLine) {
  const std::string first(40, 'a'), second(12, 'b'), third(1000, 'c');
  RequestFrame out;
  out.message = APush();  // bf16
  out.out = first.data();
  out.out_bytes = first.size();
  SlicePins pins;
  out.pins = &pins;
  for (int i = 0; i < 2; ++i) {
    v1::Push* more = out.message.add_more();
    more->set_partition(5 + i);
    more->set_encoding(i == 0 ? v1::ENCODING_FP32 : v1::ENCODING_FP16);
  }
  out.more_out = {{second.data(), second.size()}, {third.data(), third.size()}};
  grpc::ByteBuffer bb;
  ASSERT_TRUE(SerializeFrame(out, &bb).ok());
  EXPECT_EQ(pins.outstanding(), 3) << "each payload referenced, not copied";
  v1::StreamRequest as_proto;
  ASSERT_TRUE(as_proto.ParseFromString(Bytes(bb)));
  EXPECT_EQ(as_proto.push().data(), first);
  ASSERT_EQ(as_proto.more_size(), 2);
  EXPECT_EQ(as_proto.more(0).data(), second);
  EXPECT_EQ(as_proto.more(1).data(), third);
  EXPECT_EQ(as_proto.more(1).partition(), 6);

  // And a protobuf peer's message reads the same (the data in more[]).
  grpc::ByteBuffer from_peer =
      Cut(as_proto.SerializeAsString(), {3, 30, 100, 500});
  RequestFrame in;
  ASSERT_TRUE(ParseFrame(&from_peer, &in).ok());
  EXPECT_EQ(Collect(in.data), first);
  EXPECT_EQ(in.data.encoding(), WireEncoding::kBf16);
  ASSERT_EQ(in.more_data.size(), 2u);
  EXPECT_EQ(Collect(in.more_data[0]), second);
  EXPECT_EQ(in.more_data[0].encoding(), WireEncoding::kFp32);
  EXPECT_EQ(Collect(in.more_data[1]), third);
  EXPECT_EQ(in.more_data[1].encoding(), WireEncoding::kFp16);
  EXPECT_TRUE(in.message.more(1).data().empty()) << "left in the slices";
  EXPECT_EQ(in.message.more(1).partition(), 6);

  // Payloads for some of more[] only: refused.
  out.more_out.pop_back();
  EXPECT_EQ(SerializeFrame(out, &bb).error_code(), grpc::StatusCode::INTERNAL);

  // An unknown encoding in more[]: named, and nothing kept.
  as_proto.mutable_more(1)->set_encoding(static_cast<v1::Encoding>(9));
  grpc::ByteBuffer bad = Cut(as_proto.SerializeAsString(), {});
  const grpc::Status s = ParseFrame(&bad, &in);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("more[].encoding"), std::string::npos)
      << s.error_message();
  EXPECT_FALSE(in.message.has_push());
  EXPECT_TRUE(in.more_data.empty());

  // Parameters: the first's payload and two held ones.
  ResponseFrame params;
  params.message.mutable_params()->set_partition(1);
  std::memcpy(params.Reserve(8), "12345678", 8);
  const grpc::Slice held_small = params.TakeOut();
  std::memcpy(params.Reserve(100), third.data(), 100);
  const grpc::Slice held_big = params.TakeOut();
  std::memcpy(params.Reserve(4), "wxyz", 4);
  params.message.add_more()->set_partition(2);
  params.message.add_more()->set_partition(3);
  params.more_out = {held_small, held_big};
  ASSERT_TRUE(SerializeFrame(params, &bb).ok());
  v1::StreamResponse response_proto;
  ASSERT_TRUE(response_proto.ParseFromString(Bytes(bb)));
  EXPECT_EQ(response_proto.params().data(), "wxyz");
  EXPECT_EQ(response_proto.more(0).data(), "12345678");
  EXPECT_EQ(response_proto.more(1).data(), third.substr(0, 100));
  ASSERT_TRUE(SerializeFrame(params, &bb).ok());
  ResponseFrame got;
  ASSERT_TRUE(ParseFrame(&bb, &got).ok());
  EXPECT_EQ(Collect(got.data), "wxyz");
  ASSERT_EQ(got.more_data.size(), 2u);
  EXPECT_EQ(Collect(got.more_data[0]), "12345678");
  EXPECT_EQ(got.message.more(1).partition(), 3);
  EXPECT_EQ(Collect(got.more_data[1]), third.substr(0, 100));
}

TEST(GrpcFramesTest, MalformedBytesAreAClearErrorAndLeaveNothing) {
  std::string bytes = APush().SerializeAsString();
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    grpc::ByteBuffer bb = Cut(bytes.substr(0, cut), {});
    RequestFrame frame;
    const grpc::Status s = ParseFrame(&bb, &frame);
    // A prefix may be a complete message with fewer fields; a broken one
    // must fail with INVALID_ARGUMENT.
    if (!s.ok()) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_FALSE(frame.message.has_push());
      EXPECT_EQ(frame.data.bytes(), 0u);
    }
  }
  v1::StreamRequest bad = APush();
  bad.mutable_push()->set_encoding(static_cast<v1::Encoding>(9));
  grpc::ByteBuffer bb = Cut(bad.SerializeAsString(), {});
  RequestFrame frame;
  const grpc::Status s = ParseFrame(&bb, &frame);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("push.encoding"), std::string::npos);
  // A length past the end.
  grpc::ByteBuffer past = Cut(std::string("\x12\x7f\x08\x01", 4), {});
  EXPECT_EQ(ParseFrame(&past, &frame).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace fulcrum
