#include "server/ps/stream_frames.h"

#include "absl/strings/str_cat.h"
#include "common/status/payloads.h"
#include "common/status/status_macros.h"

namespace fulcrum {

ParamsRoom FrameParamsWriter::Reserve(int32_t partition, int64_t offset,
                                      int64_t count, WireEncoding encoding) {
  in_segment_ = segment_ != nullptr && partition >= 0 &&
                partition < static_cast<int32_t>(slots_->size()) &&
                (*slots_)[partition] >= 0;
  if (in_segment_) {
    // The worker has read the slot's last contents: it pushed the step
    // these values answer only after they arrived. (A slot has room for
    // the partition in fp32; narrower values start where the chunk's fp32
    // values would.)
    shm_at_ = segment_->params_offset() + (*slots_)[partition] + offset * 4;
    return {segment_->at(shm_at_), encoding};
  }
  return {frame_.Reserve(count * ElementBytes(encoding)), encoding};
}

void FrameParamsWriter::UseRing(ShmRing* ring, absl::Duration wait,
                                std::function<bool()> cancelled) {
  ring_ = ring;
  ring_wait_ = wait;
  cancelled_ = std::move(cancelled);
}

bool FrameParamsWriter::Deliver() {
  if (!on_ring_) {
    frame_.message.set_rings(ring_ != nullptr);
    on_ring_ = ring_ != nullptr;
    const bool sent = sink_->Write(frame_);
    frame_.message.clear_rings();
    return sent;
  }
  // Every partition has a slot in the segment: nothing goes out of line.
  if (frame_.out_bytes != 0 || !frame_.more_out.empty()) return false;
  return ring_->Write(frame_.message, absl::Now() + ring_wait_, cancelled_)
      .ok();
}

bool FrameParamsWriter::Send(const ParamsHeader& h) {
  if (held_count_ == held_.size()) held_.emplace_back();
  v1::Params& p = held_[held_count_++];
  p.Clear();
  p.set_partition(h.partition);
  p.set_offset(h.offset);
  p.set_version(h.version);
  p.set_clock(h.clock);
  p.set_stop(h.stop);
  p.set_encoding(static_cast<v1::Encoding>(h.encoding));
  const int64_t bytes = h.count * ElementBytes(h.encoding);
  if (in_segment_) {
    p.mutable_shm()->set_offset(shm_at_);
    p.mutable_shm()->set_bytes(bytes);
    held_out_.emplace_back();
  } else {
    // The payload Reserve gave room for, kept: the next Reserve makes a
    // fresh one.
    frame_.out_bytes = static_cast<size_t>(bytes);
    held_out_.push_back(frame_.TakeOut());
    held_bytes_ += bytes;
  }
  // What follows at once goes in the same message (StreamResponse.more).
  if (h.more && static_cast<int>(held_count_) < kMaxHeld &&
      held_bytes_ < kMaxHeldBytes) {
    return true;
  }
  // The first held leads, the rest follow.
  *frame_.message.mutable_params() = held_[0];
  frame_.out = std::move(held_out_[0]);
  frame_.out_data = nullptr;
  frame_.out_bytes = frame_.out.size();
  frame_.message.clear_more();
  frame_.more_out.clear();
  for (size_t i = 1; i < held_count_; ++i)
    *frame_.message.add_more() = held_[i];
  if (held_bytes_ > 0) {  // else every payload is in the segment
    frame_.more_out.assign(std::make_move_iterator(held_out_.begin() + 1),
                           std::make_move_iterator(held_out_.end()));
  }
  held_count_ = 0;
  held_out_.clear();
  held_bytes_ = 0;
  const bool sent = Deliver();
  frame_.message.clear_more();
  frame_.more_out.clear();
  frame_.out = grpc::Slice();
  frame_.out_bytes = 0;
  return sent;
}

namespace {

DataRange FromRange(const v1::DataRange& r) {
  return DataRange{r.chunk(), r.begin(), r.end()};
}

}  // namespace

absl::Status FromPush(const v1::Push& push, const Payload& inline_data,
                      const ShmSegment* segment, PushChunk* out,
                      absl::string_view name) {
  out->step = push.step();
  out->partition = push.partition();
  out->offset = push.offset();
  out->samples = push.samples();
  out->data = inline_data;  // push.encoding's, checked by the parse
  if (push.has_shm()) {
    if (segment == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".shm on a stream without a mapped shared-memory segment"));
    }
    if (inline_data.bytes() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".shm and ", name,
                       ".data both set: the payload is one or the other"));
    }
    ASSIGN_OR_RETURN(
        WireEncoding encoding,
        EncodingFromProto(push.encoding(), absl::StrCat(name, ".encoding")));
    const std::string field = absl::StrCat(name, ".shm");
    ASSIGN_OR_RETURN(const char* bytes,
                     segment->Grad(push.shm().offset(), push.shm().bytes(),
                                   field.c_str()));
    out->data = Payload(bytes, static_cast<size_t>(push.shm().bytes()),
                        encoding);
    // Touch every page of it first: a segment shrunk under the mapping is
    // refused before anything of it is applied (CheckSegment).
    const volatile char* probe = bytes;
    for (int64_t i = 0; i < push.shm().bytes(); i += 4096) (void)probe[i];
    if (push.shm().bytes() > 0) (void)probe[push.shm().bytes() - 1];
    RETURN_IF_ERROR(CheckSegment(segment));
  }
  out->indices = push.indices();
  out->stop = push.stop();
  // A range that is set names a chunk (>= 0): chunk -1 is how a push
  // without one is kept, and a sent -1 once passed for "no range".
  if (push.has_range() && push.range().chunk() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".range.chunk must be >= 0, got ",
                     push.range().chunk()));
  }
  out->range = push.has_range() ? FromRange(push.range()) : DataRange{};
  out->shares.clear();
  for (int i = 0; i < push.shares_size(); ++i) {
    const v1::Share& share = push.shares(i);
    if (share.has_range() && share.range().chunk() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".shares[", i, "].range.chunk must be >= 0, got ",
                       share.range().chunk()));
    }
    out->shares.push_back(
        {share.samples(),
         share.has_range() ? FromRange(share.range()) : DataRange{}});
  }
  return absl::OkStatus();
}


absl::Status CheckSegment(const ShmSegment* segment) {
  if (segment == nullptr || !segment->truncated()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "hello.shm: segment ", segment->name(),
      " was shrunk while mapped (its creator truncated it); what was read "
      "past its end was zeros. The stream is closed"));
}

absl::Status CheckMore(const v1::StreamRequest& message,
                       const ShmSegment* segment) {
  for (const v1::Push& more : message.more()) {
    if (more.has_shm() && segment == nullptr) {
      return absl::InvalidArgumentError(
          "more[].shm on a stream without a mapped shared-memory segment");
    }
    // (A frame read from gRPC holds its payloads out of line: only a ring's
    // message can carry them here.)
    if (!more.data().empty()) {
      return absl::InvalidArgumentError(
          "more[].data in a ring message: payloads there travel in the "
          "segment");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPushes(const v1::StreamRequest& message,
                         const ShmSegment* segment) {
  if (!message.has_push()) {
    return absl::InvalidArgumentError(
        "hello may only be the first message of a stream");
  }
  return CheckMore(message, segment);
}

absl::Status PushAt(const RequestFrame& request, int i,
                    const ShmSegment* segment, PushChunk* out) {
  if (i == 0)
    return FromPush(request.message.push(), request.data, segment, out);
  const size_t m = static_cast<size_t>(i - 1);
  return FromPush(request.message.more(i - 1),
                  m < request.more_data.size() ? request.more_data[m]
                                               : Payload(),
                  segment, out, "more[]");
}

absl::StatusOr<bool> ReadRingRequest(ShmRing& ring,
                                     absl::FunctionRef<bool()> cancelled,
                                     RequestFrame* r) {
  r->data = Payload();  // payloads are in the segment (push.shm)
  r->more_data.clear();
  absl::StatusOr<bool> read =
      ring.Read(&r->message, absl::InfiniteFuture(), cancelled);
  if (read.ok() || read.status().code() == absl::StatusCode::kCancelled)
    return read.value_or(false);
  return Prefixed("the request ring", read.status());
}

}  // namespace fulcrum
