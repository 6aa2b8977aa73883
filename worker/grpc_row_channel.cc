#include "worker/grpc_row_channel.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/net/grpc_options.h"
#include "common/status/grpc_status.h"

namespace fulcrum {

GrpcRowChannel::GrpcRowChannel(const ChannelOptions& options)
    : options_(options) {
  for (const std::string& address : options_.shard_addresses) {
    stubs_.push_back(v1::ParameterServer::NewStub(MakeChannel(address)));
  }
}

template <typename Request>
void GrpcRowChannel::Identify(int shard, Request* r) const {
  r->set_job_id(options_.job_id);
  r->set_worker_id(options_.worker_id);
  r->set_generation(options_.generation);
  if (shard < static_cast<int>(options_.shard_credentials.size()))
    r->set_credential(options_.shard_credentials[shard]);
}

namespace {

void SetDeadline(grpc::ClientContext* context, absl::Time deadline) {
  if (deadline != absl::InfiniteFuture())
    context->set_deadline(absl::ToChronoTime(deadline));
}

}  // namespace

void GrpcRowChannel::Pull(const RowPullCall& call,
                          std::function<void(absl::Status)> done) {
  if (call.shard < 0 || call.shard >= static_cast<int>(stubs_.size())) {
    done(absl::InvalidArgumentError(
        absl::StrCat("shard ", call.shard, " is not one of the job's ",
                     stubs_.size())));
    return;
  }
  struct State {
    grpc::ClientContext context;
    v1::SparsePullRequest request;
    v1::SparsePullResponse response;
  };
  auto state = std::make_shared<State>();
  Identify(call.shard, &state->request);
  state->request.set_table(*call.table);
  state->request.set_step(call.step);
  state->request.mutable_ids()->Add(call.ids.begin(), call.ids.end());
  SetDeadline(&state->context, call.deadline);
  float* out = call.out;
  const size_t want = call.ids.size() * call.dim * sizeof(float);
  stubs_[call.shard]->async()->SparsePull(
      &state->context, &state->request, &state->response,
      [state, out, want, done = std::move(done)](grpc::Status s) {
        if (!s.ok()) {
          done(FromGrpcStatus(s));
          return;
        }
        if (state->response.rows().size() != want) {
          done(absl::InternalError(absl::StrCat(
              "SparsePull answered ", state->response.rows().size(),
              " bytes of rows, want ", want)));
          return;
        }
        if (want > 0) std::memcpy(out, state->response.rows().data(), want);
        done(absl::OkStatus());
      });
}

void GrpcRowChannel::Push(const RowPushCall& call,
                          std::function<void(absl::Status)> done) {
  if (call.shard < 0 || call.shard >= static_cast<int>(stubs_.size())) {
    done(absl::InvalidArgumentError(
        absl::StrCat("shard ", call.shard, " is not one of the job's ",
                     stubs_.size())));
    return;
  }
  struct State {
    grpc::ClientContext context;
    v1::SparsePushRequest request;
    v1::SparsePushResponse response;
  };
  auto state = std::make_shared<State>();
  Identify(call.shard, &state->request);
  v1::SparsePushRequest& r = state->request;
  r.set_table(*call.table);
  r.set_step(call.step);
  r.set_chunk(call.chunk);
  r.set_chunks(call.chunks);
  r.mutable_ids()->Add(call.ids.begin(), call.ids.end());
  r.mutable_counts()->Add(call.counts.begin(), call.counts.end());
  r.set_gradients(reinterpret_cast<const char*>(call.gradients.data()),
                  call.gradients.size() * sizeof(float));
  SetDeadline(&state->context, call.deadline);
  stubs_[call.shard]->async()->SparsePush(
      &state->context, &state->request, &state->response,
      [state, done = std::move(done)](grpc::Status s) {
        done(s.ok() ? absl::OkStatus() : FromGrpcStatus(s));
      });
}

}  // namespace fulcrum
