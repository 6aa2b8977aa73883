#include "common/dataplane/grpc_frames.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace fulcrum {

// ---- SlicePins -------------------------------------------------------------

struct SlicePins::State {
  mutable absl::Mutex mu;
  int64_t outstanding ABSL_GUARDED_BY(mu) = 0;
};

namespace {

// What a pinned slice's destroy callback gets: a share of the state.
struct PinRef {
  std::shared_ptr<SlicePins::State> state;
};

}  // namespace

SlicePins::SlicePins() : state_(std::make_shared<State>()) {}
SlicePins::~SlicePins() = default;

grpc::Slice SlicePins::Pin(const char* data, size_t bytes) {
  {
    absl::MutexLock lock(&state_->mu);
    ++state_->outstanding;
  }
  auto* ref = new PinRef{state_};
  return grpc::Slice(
      const_cast<char*>(data), bytes,
      +[](void* p) {
        auto* r = static_cast<PinRef*>(p);
        {
          absl::MutexLock lock(&r->state->mu);
          --r->state->outstanding;
        }
        delete r;
      },
      ref);
}

bool SlicePins::WaitUntilReleased(absl::Time deadline) {
  absl::MutexLock lock(&state_->mu);
  return state_->mu.AwaitWithDeadline(
      absl::Condition(
          +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
            return s->outstanding == 0;
          },
          state_.get()),
      deadline);
}

int64_t SlicePins::outstanding() const {
  absl::MutexLock lock(&state_->mu);
  return state_->outstanding;
}

char* ResponseFrame::Reserve(size_t bytes) {
  out_bytes = bytes;
  if (bytes <= sizeof(small)) {
    out = grpc::Slice();
    return out_data = small;
  }
  // A heap slice (never inlined at this size), 4-aligned so that the caller
  // may write floats there.
  grpc::Slice room(bytes + 4);
  const size_t skew =
      (4 - reinterpret_cast<uintptr_t>(room.begin()) % 4) % 4;
  out = room.sub(skew, skew + bytes);
  return out_data = reinterpret_cast<char*>(const_cast<uint8_t*>(out.begin()));
}

const char* StreamMethodName() {
  static const std::string* name = new std::string(absl::StrCat(
      "/",
      v1::Push::descriptor()->file()->FindServiceByName("ParameterServer")
          ->full_name(),
      "/Stream"));
  return name->c_str();
}

namespace {

// ---- Writing ---------------------------------------------------------------

constexpr uint8_t kVarint = 0, kLengthDelimited = 2;
constexpr uint8_t Tag(int field, uint8_t wire_type) {
  return static_cast<uint8_t>((field << 3) | wire_type);
}
// Field numbers (parameter_server.proto).
constexpr int kRequestHello = 1, kRequestPush = 2, kRequestMore = 3,
              kPushData = 6,
              kPushRange = 8, kPushIndices = 9, kPushShm = 10,
              kPushShares = 11,
              kResponseParams = 1, kResponseMore = 2, kResponseRings = 3,
              kParamsData = 5,
              kParamsShm = 8;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// outer_tag, the length of (inner + data field), inner, then data's tag
// and length: the bytes before the payload.
std::string Prefix(uint8_t outer_tag, const std::string& inner,
                   uint8_t data_tag, size_t data_bytes) {
  const size_t data_field =
      data_bytes == 0 ? 0 : 1 + VarintSize(data_bytes) + data_bytes;
  std::string out;
  out.reserve(inner.size() + 24);
  out.push_back(static_cast<char>(outer_tag));
  PutVarint(inner.size() + data_field, &out);
  out += inner;
  if (data_bytes > 0) {
    out.push_back(static_cast<char>(data_tag));
    PutVarint(data_bytes, &out);
  }
  return out;
}

// A message's bytes as gRPC slices: protobuf's few bytes copied, runs of
// them in one slice; each payload a slice of its own, not copied.
class SliceList {
 public:
  std::string& text() { return text_; }
  void Payload(grpc::Slice data) {
    if (data.size() == 0) return;
    if (!text_.empty()) slices_.emplace_back(text_);
    text_.clear();
    slices_.push_back(std::move(data));
  }
  void Into(grpc::ByteBuffer* out) {
    if (!text_.empty() || slices_.empty()) slices_.emplace_back(text_);
    grpc::ByteBuffer bb(slices_.data(), slices_.size());
    out->Swap(&bb);
  }

 private:
  std::string text_;
  std::vector<grpc::Slice> slices_;
};

// The more[] messages (pushes or parameters) as field `field`, each with
// its payload `data(i)` as its data field `data_field`; INTERNAL if one
// carries data in the message itself, or `outs` payloads are given for a
// different number of them (0: none has one).
template <typename Message, typename Data>
grpc::Status AppendMore(
    int field, const google::protobuf::RepeatedPtrField<Message>& more,
    int data_field, size_t outs, Data data, SliceList* out) {
  if (outs != 0 && outs != static_cast<size_t>(more.size())) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "more[] payloads given for some of more[] only");
  }
  for (int i = 0; i < more.size(); ++i) {
    const Message& m = more[i];
    if (!m.data().empty()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "more[].data must be sent out of line (more_out)");
    }
    grpc::Slice payload = outs == 0 ? grpc::Slice() : data(i);
    out->text() += Prefix(Tag(field, kLengthDelimited), m.SerializeAsString(),
                          Tag(data_field, kLengthDelimited), payload.size());
    out->Payload(std::move(payload));
  }
  return grpc::Status::OK;
}

// A payload sent from the caller's memory: pinned, or referenced.
grpc::Slice Referenced(const char* data, size_t bytes, SlicePins* pins) {
  if (bytes == 0) return grpc::Slice();
  return pins != nullptr
             ? pins->Pin(data, bytes)
             : grpc::Slice(data, bytes, grpc::Slice::STATIC_SLICE);
}

}  // namespace

grpc::Status SerializeFrame(const RequestFrame& frame, grpc::ByteBuffer* out) {
  SliceList list;
  if (!frame.message.has_push()) {
    list.text() = frame.message.SerializeAsString();
    list.Into(out);
    return grpc::Status::OK;
  }
  if (!frame.message.push().data().empty()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "push.data must be sent out of line (frame.out)");
  }
  if (grpc::Status s = AppendMore(
          kRequestMore, frame.message.more(), kPushData,
          frame.more_out.size(),
          [&](int i) {
            return Referenced(frame.more_out[i].data, frame.more_out[i].bytes,
                              frame.pins);
          },
          &list);
      !s.ok()) {
    return s;
  }
  list.text() += Prefix(Tag(kRequestPush, kLengthDelimited),
                        frame.message.push().SerializeAsString(),
                        Tag(kPushData, kLengthDelimited), frame.out_bytes);
  if (frame.out_bytes != 0)
    list.Payload(Referenced(frame.out, frame.out_bytes, frame.pins));
  list.Into(out);
  return grpc::Status::OK;
}

grpc::Status SerializeFrame(const ResponseFrame& frame,
                            grpc::ByteBuffer* out) {
  if (!frame.message.params().data().empty()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "params.data must be sent out of line (frame.out)");
  }
  SliceList list;
  if (grpc::Status s = AppendMore(
          kResponseMore, frame.message.more(), kParamsData,
          frame.more_out.size(), [&](int i) { return frame.more_out[i]; },
          &list);
      !s.ok()) {
    return s;
  }
  if (frame.message.rings()) {
    list.text().push_back(static_cast<char>(Tag(kResponseRings, kVarint)));
    list.text().push_back(1);
  }
  list.text() += Prefix(Tag(kResponseParams, kLengthDelimited),
                        frame.message.params().SerializeAsString(),
                        Tag(kParamsData, kLengthDelimited), frame.out_bytes);
  if (frame.out_bytes != 0) list.Payload(frame.TakeOut());
  list.Into(out);
  return grpc::Status::OK;
}

grpc::Slice ResponseFrame::TakeOut() const {
  if (out_bytes == 0) return grpc::Slice();
  return out_data == small ? grpc::Slice(small, out_bytes)
                           : out.sub(0, out_bytes);
}

namespace {

// ---- Reading ---------------------------------------------------------------

// Protobuf's wire format over a message's slices, without copying bytes
// fields it is asked to keep in place.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    for (const grpc::Slice& s : slices) size_ += s.size();
  }

  size_t pos() const { return pos_; }
  size_t size() const { return size_; }

  bool Byte(uint8_t* b) {
    while (index_ < slices_.size() && offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
    if (index_ == slices_.size()) return false;
    *b = slices_[index_].begin()[offset_++];
    ++pos_;
    return true;
  }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }

  // The next n bytes as pieces of `out` (no copy).
  bool Pieces(size_t n, Payload* out) {
    if (n > size_ - pos_) return false;
    pos_ += n;
    while (n > 0) {
      const grpc::Slice& s = slices_[index_];
      const size_t take = std::min(n, s.size() - offset_);
      out->Add(s.begin() + offset_, take);
      offset_ += take;
      n -= take;
      if (offset_ == s.size()) {
        ++index_;
        offset_ = 0;
      }
    }
    return true;
  }

  // The next n bytes copied (small fields).
  bool Copy(size_t n, std::string* out) {
    Payload p;
    if (!Pieces(n, &p)) return false;
    out->clear();
    out->reserve(n);
    p.ForEachPiece([&](const char* d, size_t k) { out->append(d, k); });
    return true;
  }

  bool Skip(uint8_t wire_type) {
    uint64_t v;
    switch (wire_type) {
      case 0: return Varint(&v);
      case 1: return SkipBytes(8);
      case 2: return Varint(&v) && SkipBytes(v);
      case 5: return SkipBytes(4);
      default: return false;  // groups: not in our messages
    }
  }

 private:
  bool SkipBytes(uint64_t n) {
    Payload ignored;
    return Pieces(n, &ignored);
  }

  const std::vector<grpc::Slice>& slices_;
  size_t size_ = 0, pos_ = 0, index_ = 0, offset_ = 0;
};

grpc::Status Malformed(absl::string_view what) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      absl::StrCat("malformed message: ", what));
}

// Reads the fields of one message that ends at `end`, calling
// field(number, wire_type) for each; field returns false when the value
// was malformed. Unknown fields are the caller's to Skip.
template <typename F>
bool Fields(SliceReader& r, size_t end, F&& field) {
  while (r.pos() < end) {
    uint64_t tag;
    if (!r.Varint(&tag)) return false;
    if (!field(static_cast<int>(tag >> 3), static_cast<uint8_t>(tag & 7)))
      return false;
    if (r.pos() > end) return false;
  }
  return r.pos() == end;
}

// The end of a length-delimited field that starts here.
bool Length(SliceReader& r, size_t end, size_t* field_end) {
  uint64_t n;
  if (!r.Varint(&n) || n > end - r.pos()) return false;
  *field_end = r.pos() + n;
  return true;
}

// A bytes field left in place as `data`'s pieces (the last one wins, as in
// protobuf).
bool ReadData(SliceReader& r, size_t end, Payload* data) {
  size_t data_end;
  if (!Length(r, end, &data_end)) return false;
  data->Clear();
  return r.Pieces(data_end - r.pos(), data);
}

// A small length-delimited submessage, parsed by protobuf.
bool Submessage(SliceReader& r, size_t end, google::protobuf::Message* m) {
  size_t field_end;
  std::string bytes;
  return Length(r, end, &field_end) && r.Copy(field_end - r.pos(), &bytes) &&
         m->ParseFromString(bytes);
}

bool ParsePush(SliceReader& r, size_t end, v1::Push* push, Payload* data) {
  return Fields(r, end, [&](int field, uint8_t wt) {
    uint64_t v = 0;
    if (field == kPushData && wt == kLengthDelimited)
      return ReadData(r, end, data);
    if (field == kPushRange && wt == kLengthDelimited)
      return Submessage(r, end, push->mutable_range());
    if (field == kPushShm && wt == kLengthDelimited)
      return Submessage(r, end, push->mutable_shm());
    if (field == kPushShares && wt == kLengthDelimited)
      return Submessage(r, end, push->add_shares());
    if (field == kPushIndices && wt == kLengthDelimited) {
      size_t indices_end;
      return Length(r, end, &indices_end) &&
             r.Copy(indices_end - r.pos(), push->mutable_indices());
    }
    if (field >= 1 && field <= 7 && field != kPushData && wt == 0) {
      if (!r.Varint(&v)) return false;
      switch (field) {
        case 1: push->set_step(static_cast<int64_t>(v)); break;
        case 2: push->set_partition(static_cast<int32_t>(v)); break;
        case 3: push->set_offset(static_cast<int64_t>(v)); break;
        case 4: push->set_encoding(static_cast<v1::Encoding>(v)); break;
        case 5: push->set_samples(static_cast<int64_t>(v)); break;
        case 7: push->set_stop(v != 0); break;
      }
      return true;
    }
    return r.Skip(wt);
  });
}

bool ParseParams(SliceReader& r, size_t end, v1::Params* params,
                 Payload* data) {
  return Fields(r, end, [&](int field, uint8_t wt) {
    uint64_t v = 0;
    if (field == kParamsData && wt == kLengthDelimited)
      return ReadData(r, end, data);
    if (field == kParamsShm && wt == kLengthDelimited)
      return Submessage(r, end, params->mutable_shm());
    if (field >= 1 && field <= 7 && field != kParamsData && wt == 0) {
      if (!r.Varint(&v)) return false;
      switch (field) {
        case 1: params->set_partition(static_cast<int32_t>(v)); break;
        case 2: params->set_version(static_cast<int64_t>(v)); break;
        case 3: params->set_offset(static_cast<int64_t>(v)); break;
        case 4: params->set_encoding(static_cast<v1::Encoding>(v)); break;
        case 6: params->set_stop(v != 0); break;
        case 7: params->set_clock(static_cast<int64_t>(v)); break;
      }
      return true;
    }
    return r.Skip(wt);
  });
}

template <typename Frame>
grpc::Status Take(grpc::ByteBuffer* in, Frame* frame) {
  frame->message.Clear();
  frame->data.Clear();
  frame->data.set_encoding(WireEncoding::kFp32);
  frame->more_data.clear();
  frame->slices.clear();
  grpc::Status s = in->Dump(&frame->slices);
  in->Clear();
  return s;
}

// The end of a parse: the payload's encoding set, or the frame cleared and
// why - the message did not parse, or its encoding (`field`) is unknown.
// (more[i]'s encodings too: `more_field`.)
template <typename Frame>
grpc::Status Settle(Frame* frame, bool parsed, absl::string_view message,
                    int encoding, absl::string_view field,
                    absl::string_view more_field) {
  absl::Status e;
  if (parsed) {
    absl::StatusOr<WireEncoding> first = EncodingFromProto(encoding, field);
    if (first.ok()) frame->data.set_encoding(*first);
    e = first.status();
    for (size_t i = 0; e.ok() && i < frame->more_data.size(); ++i) {
      absl::StatusOr<WireEncoding> more = EncodingFromProto(
          frame->message.more(static_cast<int>(i)).encoding(), more_field);
      if (more.ok()) frame->more_data[i].set_encoding(*more);
      e = more.status();
    }
    if (e.ok()) return grpc::Status::OK;
  }
  const grpc::Status s =
      parsed ? grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string(e.message()))
             : Malformed(absl::StrCat(message, " does not parse"));
  frame->message.Clear();
  frame->data.Clear();
  frame->more_data.clear();
  return s;
}

}  // namespace

grpc::Status ParseFrame(grpc::ByteBuffer* in, RequestFrame* frame) {
  if (grpc::Status s = Take(in, frame); !s.ok()) return s;
  SliceReader r(frame->slices);
  const bool ok = Fields(r, r.size(), [&](int field, uint8_t wt) {
    size_t end;
    if (field == kRequestHello && wt == kLengthDelimited) {
      std::string bytes;
      frame->data.Clear();
      return Length(r, r.size(), &end) && r.Copy(end - r.pos(), &bytes) &&
             frame->message.mutable_hello()->ParseFromString(bytes);
    }
    if (field == kRequestPush && wt == kLengthDelimited) {
      return Length(r, r.size(), &end) &&
             ParsePush(r, end, frame->message.mutable_push(), &frame->data);
    }
    if (field == kRequestMore && wt == kLengthDelimited) {
      return Length(r, r.size(), &end) &&
             ParsePush(r, end, frame->message.add_more(),
                       &frame->more_data.emplace_back());
    }
    return r.Skip(wt);
  });
  // A hello's push().encoding() is 0: fp32.
  return Settle(frame, ok, "fulcrum.v1.StreamRequest",
                frame->message.push().encoding(), "push.encoding",
                "more[].encoding");
}

grpc::Status ParseFrame(grpc::ByteBuffer* in, ResponseFrame* frame) {
  if (grpc::Status s = Take(in, frame); !s.ok()) return s;
  SliceReader r(frame->slices);
  const bool ok = Fields(r, r.size(), [&](int field, uint8_t wt) {
    size_t end;
    if (field == kResponseParams && wt == kLengthDelimited) {
      return Length(r, r.size(), &end) &&
             ParseParams(r, end, frame->message.mutable_params(),
                         &frame->data);
    }
    if (field == kResponseMore && wt == kLengthDelimited) {
      return Length(r, r.size(), &end) &&
             ParseParams(r, end, frame->message.add_more(),
                         &frame->more_data.emplace_back());
    }
    if (field == kResponseRings && wt == kVarint) {
      uint64_t v;
      if (!r.Varint(&v)) return false;
      frame->message.set_rings(v != 0);
      return true;
    }
    return r.Skip(wt);
  });
  return Settle(frame, ok, "fulcrum.v1.StreamResponse",
                frame->message.params().encoding(), "params.encoding",
                "more[].encoding");
}

}  // namespace fulcrum
