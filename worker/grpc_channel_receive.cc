// GrpcParameterChannel's receiving side: every Params checked (partition,
// range, the shared-memory reference) and decoded into the parameter
// buffer.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "worker/grpc_channel.h"
#include "worker/grpc_channel_state.h"

namespace fulcrum {

bool GrpcParameterChannel::Receive(Stream* s, Connection& conn,
                                   bool* answered) {
  ResponseFrame response;
  while (conn.rw->Read(&response)) {
    if (!response.parse_error.ok()) {
      arrivals_.Fail(absl::InternalError(
          absl::StrCat("shard ", s->shard, " sent a message that does not "
                       "parse: ", response.parse_error.error_message())));
      return false;
    }
    if (!Apply(s, conn, response.message.params(), response.data)) return false;
    *answered = true;
    for (const v1::Params& more : response.message.more()) {
      if (!more.has_shm() || !more.data().empty()) {
        arrivals_.Fail(absl::InternalError(absl::StrCat(
            "shard ", s->shard, " sent more[] parameters that are not in the "
            "shared-memory segment")));
        return false;
      }
      if (!Apply(s, conn, more, Payload())) return false;
    }
  }
  return true;
}

bool GrpcParameterChannel::Apply(Stream* s, Connection& conn,
                                 const v1::Params& p,
                                 const Payload& inline_data) {
  const int32_t id = p.partition();
  if (id < 0 || id >= static_cast<int32_t>(stream_of_partition_.size()) ||
      stream_of_partition_[id] < 0 ||
      streams_[stream_of_partition_[id]].get() != s) {
    arrivals_.Fail(absl::InternalError(absl::StrCat(
        "shard ", s->shard, " sent unknown partition ", id)));
    return false;
  }
  const Partition& part = layout_->partitions()[id];
  Payload in_segment;
  if (!ShmPayload(s, conn, p, inline_data, &in_segment)) return false;
  const Payload& data = p.has_shm() ? in_segment : inline_data;
  const int64_t n = data.elements();
  if (p.offset() < 0 || p.offset() + n > part.size ||
      data.bytes() % ElementBytes(data.encoding()) != 0) {
    arrivals_.Fail(absl::InternalError(absl::StrCat(
        "shard ", s->shard, " sent a bad chunk of partition ", id)));
    return false;
  }
  Decode(data, params_ + part.offset + p.offset());
  arrivals_.Received(id, n, p.clock(), p.stop());
  return true;
}

bool GrpcParameterChannel::ShmPayload(Stream* s, Connection& conn,
                                      const v1::Params& p,
                                      const Payload& inline_data,
                                      Payload* out) {
  absl::Status error;
  {
    absl::MutexLock lock(&s->mu);
    if (conn.shm_state == ShmState::kPending) {
      // The first Params says whether the shard mapped the segment.
      conn.shm_state =
          p.has_shm() ? ShmState::kMapped : ShmState::kRefused;
      if (!p.has_shm()) {
        conn.shm.reset();
        if (!s->shm_warned) {
          s->shm_warned = true;
          std::cerr << "fulcrum-worker: shard " << s->shard
                    << " did not map the shared-memory segment (see its "
                       "log); payloads go over TCP\n";
        }
      }
    }
    if (!p.has_shm()) return true;
    if (conn.shm_state != ShmState::kMapped || inline_data.bytes() != 0) {
      error = absl::InternalError(absl::StrCat(
          "shard ", s->shard, " sent params.shm on a stream whose segment it ",
          "did not map, or with params.data"));
    }
  }
  if (error.ok()) {
    absl::StatusOr<WireEncoding> encoding =
        EncodingFromProto(p.encoding(), "params.encoding");
    absl::StatusOr<const char*> bytes =
        encoding.ok() ? conn.shm->Params(p.shm().offset(), p.shm().bytes(),
                                         "params.shm")
                      : absl::StatusOr<const char*>(encoding.status());
    if (bytes.ok()) {
      *out = Payload(*bytes, static_cast<size_t>(p.shm().bytes()), *encoding);
      return true;
    }
    error = absl::InternalError(absl::StrCat("shard ", s->shard, " sent ",
                                             bytes.status().message()));
  }
  arrivals_.Fail(error);
  return false;
}

}  // namespace fulcrum
