#include "client/export.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/config/model_layout.h"

namespace fulcrum {

absl::Status ModelAssembler::Add(const v1::ExportChunk& chunk) {
  if (chunk.has_spec()) {
    const v1::JobSpec& spec = chunk.spec();
    absl::StatusOr<ParameterLayout> layout = LayoutForSpec(spec);
    if (!layout.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec: ", layout.status().message()));
    }
    layout_ = std::move(*layout);
    const std::string& mode = spec.consistency().mode();
    arrival_ = mode == "ssp" || mode == "async";
    model_.layers.assign(spec.model().layers().begin(),
                         spec.model().layers().end());
    model_.params.assign(layout_->total_size(), 0.0f);
    received_.assign(layout_->partitions().size(), 0);
    tables_.clear();
    for (const v1::EmbeddingTableSpec& t : spec.embeddings())
      tables_.push_back({t.name(), t.dim(), {}, {}});
    return absl::OkStatus();
  }
  if (!layout_.has_value())
    return absl::InvalidArgumentError("a chunk came before the job's spec");
  if (chunk.has_rows()) return AddRows(chunk.shard(), chunk.rows());
  const v1::Params& p = chunk.params();
  if (p.partition() < 0 ||
      p.partition() >= static_cast<int32_t>(received_.size())) {
    return absl::DataLossError(absl::StrCat(
        "shard ", chunk.shard(), " sent unknown partition ", p.partition()));
  }
  const Partition& part = layout_->partitions()[p.partition()];
  const int64_t n = p.data().size() / sizeof(float);
  if (p.offset() < 0 || p.offset() + n > part.size ||
      p.data().size() % sizeof(float) != 0) {
    return absl::DataLossError(
        absl::StrCat("shard ", chunk.shard(), " sent a bad chunk"));
  }
  std::memcpy(model_.params.data() + part.offset + p.offset(),
              p.data().data(), n * sizeof(float));
  received_[p.partition()] += n;
  versions_.insert(p.version());
  return absl::OkStatus();
}

absl::Status ModelAssembler::AddRows(int32_t shard, const v1::RowsPage& page) {
  auto t = std::find_if(tables_.begin(), tables_.end(),
                        [&](const ExportedTable& e) { return e.name == page.table(); });
  const size_t n = page.ids().size() / sizeof(uint64_t);
  if (t == tables_.end() || page.dim() != t->dim ||
      page.ids().size() % sizeof(uint64_t) != 0 ||
      page.values().size() != n * t->dim * sizeof(float)) {
    return absl::DataLossError(absl::StrCat(
        "shard ", shard, " sent a bad page of rows (table '",
        page.table().substr(0, 64), "')"));
  }
  const size_t ids = t->ids.size(), values = t->values.size();
  t->ids.resize(ids + n);
  std::memcpy(t->ids.data() + ids, page.ids().data(), page.ids().size());
  t->values.resize(values + n * t->dim);
  std::memcpy(t->values.data() + values, page.values().data(),
              page.values().size());
  return absl::OkStatus();
}

absl::StatusOr<ModelFile> ModelAssembler::Finish() {
  if (!layout_.has_value())
    return absl::DataLossError("the export ended before the job's spec");
  for (size_t i = 0; i < received_.size(); ++i) {
    if (received_[i] != layout_->partitions()[i].size) {
      return absl::DataLossError(
          absl::StrCat("partition ", i, " arrived incomplete"));
    }
  }
  // ssp/async: each partition applies pushes as they arrive, so versions
  // differ legitimately (a worker killed mid-step pushed some partitions of
  // its last step, not all): the model is what the shards hold, its version
  // the newest. sync: one version, or a step is still being applied.
  if (versions_.size() != 1 && !arrival_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shards are at different versions (", *versions_.begin(), " to ",
        *versions_.rbegin(), ": a sync job still training); export it after "
        "it ends"));
  }
  if (versions_.empty()) return absl::DataLossError("no partition arrived");
  model_.version = *versions_.rbegin();
  return std::move(model_);
}

}  // namespace fulcrum
