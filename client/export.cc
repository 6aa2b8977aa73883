#include "client/export.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/net/grpc_options.h"
#include "common/status/grpc_status.h"
#include "common/tensor/layout.h"
#include "fulcrum/v1/parameter_server.grpc.pb.h"

namespace fulcrum {

absl::StatusOr<ModelFile> PullModel(const v1::JobStatus& job,
                                    std::chrono::milliseconds timeout) {
  const v1::JobSpec& spec = job.spec();
  const std::vector<int> sizes(spec.model().layers().begin(),
                               spec.model().layers().end());
  absl::StatusOr<ParameterLayout> layout =
      ParameterLayout::ForMlp(sizes, spec.shards(), spec.partition_bytes());
  if (!layout.ok()) return layout.status();
  if (job.shard_addresses_size() != spec.shards()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.job_id(), " has no shards assigned (state ",
                     v1::JobState_Name(job.state()), ")"));
  }
  ModelFile model;
  model.layers.assign(sizes.begin(), sizes.end());
  model.params.assign(layout->total_size(), 0.0f);
  std::vector<int64_t> received(layout->partitions().size(), 0);
  std::set<int64_t> versions;
  for (int shard = 0; shard < spec.shards(); ++shard) {
    if (layout->PartitionsOfShard(shard).empty()) continue;
    auto stub =
        v1::ParameterServer::NewStub(MakeChannel(job.shard_addresses(shard)));
    grpc::ClientContext context;
    SetTimeout(&context, timeout);
    v1::PullRequest request;
    request.set_job_id(job.job_id());
    auto reader = stub->Pull(&context, request);
    v1::Params p;
    while (reader->Read(&p)) {
      if (p.partition() < 0 ||
          p.partition() >= static_cast<int32_t>(received.size())) {
        return absl::DataLossError(absl::StrCat(
            "shard ", shard, " sent unknown partition ", p.partition()));
      }
      const Partition& part = layout->partitions()[p.partition()];
      const int64_t n = p.data().size() / sizeof(float);
      if (p.offset() < 0 || p.offset() + n > part.size) {
        return absl::DataLossError(
            absl::StrCat("shard ", shard, " sent a bad chunk"));
      }
      std::memcpy(model.params.data() + part.offset + p.offset(),
                  p.data().data(), n * sizeof(float));
      received[p.partition()] += n;
      versions.insert(p.version());
    }
    absl::Status s = FromGrpcStatus(reader->Finish());
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("shard ", shard, " (",
                                                 job.shard_addresses(shard),
                                                 "): ", s.message()));
    }
  }
  for (size_t i = 0; i < received.size(); ++i) {
    if (received[i] != layout->partitions()[i].size) {
      return absl::DataLossError(
          absl::StrCat("partition ", i, " arrived incomplete"));
    }
  }
  if (versions.size() != 1) {
    return absl::FailedPreconditionError(
        "the shards are at different versions (the job is still training); "
        "export it "
        "after it ends");
  }
  model.version = *versions.begin();
  return model;
}

}  // namespace fulcrum
