#include "worker/ctr_workload.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/model/binary_metrics.h"

namespace fulcrum {

CtrWorkload::CtrWorkload(Backend* backend, const ClickLogs* train,
                         TestLoader load_test, ChannelFactory* channels,
                         Options options)
    : backend_(backend),
      train_(train),
      load_test_(std::move(load_test)),
      channels_(channels),
      options_(std::move(options)),
      max_batch_(std::max(options_.batch, options_.eval_batch)),
      max_bags_(int64_t{max_batch_} * options_.shape.fields),
      dense_(int64_t{max_batch_} * options_.shape.dense),
      labels_(max_batch_),
      row_values_(max_bags_ * options_.shape.dim),
      row_grads_(max_bags_ * options_.shape.dim),
      ids_(max_bags_),
      offsets_(max_bags_ + 1),
      dense_dev_(backend, dense_.data(), static_cast<int64_t>(dense_.size())),
      row_values_dev_(backend, row_values_.data(),
                      static_cast<int64_t>(row_values_.size())),
      row_grads_dev_(backend, row_grads_.data(),
                     static_cast<int64_t>(row_grads_.size())),
      index_on_backend_(backend, max_bags_) {
  for (int64_t j = 0; j <= max_bags_; ++j)
    offsets_[j] = static_cast<int32_t>(j);
}

CtrWorkload::~CtrWorkload() = default;

absl::StatusOr<std::unique_ptr<CtrWorkload>> CtrWorkload::Create(
    Backend* backend, const ParameterLayout* layout, const ClickLogs* train,
    TestLoader load_test, ChannelFactory* channels, Options options) {
  std::unique_ptr<CtrWorkload> w(new CtrWorkload(
      backend, train, std::move(load_test), channels, std::move(options)));
  ASSIGN_OR_RETURN(w->model_,
                   EmbeddingMlp::Create(backend, *layout, w->options_.shape,
                                        w->max_batch_));
  RETURN_IF_ERROR(backend->status());  // every buffer was allocated
  return w;
}

absl::Status CtrWorkload::StartGeneration(const ChannelOptions& options) {
  rows_.reset();
  row_channel_.reset();
  ASSIGN_OR_RETURN(row_channel_, channels_->CreateRows(options));
  RowClient::Options o = options_.rows;
  o.shards = static_cast<int>(options.shard_addresses.size());
  o.chunk_bytes = options.chunk_bytes;
  rows_ = std::make_unique<RowClient>(row_channel_.get(), o);
  return absl::OkStatus();
}

absl::StatusOr<EmbeddingMlp::Batch> CtrWorkload::Prepare(
    const ClickLogs& logs, const int64_t* rows_of, int64_t first, int count,
    int64_t step) {
  const EmbeddingMlpShape& s = options_.shape;
  for (int i = 0; i < count; ++i) {
    const int64_t r = rows_of != nullptr ? rows_of[i] : first + i;
    labels_[i] = logs.labels[r];
    std::copy_n(&logs.dense[r * s.dense], s.dense, &dense_[int64_t{i} * s.dense]);
    logs.Ids(r, &ids_[int64_t{i} * s.fields]);
  }
  const int bags = count * s.fields;
  RETURN_IF_ERROR(indexer_.Build(absl::MakeConstSpan(ids_.data(), bags),
                                 absl::MakeConstSpan(offsets_.data(), bags + 1),
                                 &index_));
  if (rows_ == nullptr)
    return absl::FailedPreconditionError("no generation joined");
  RETURN_IF_ERROR(rows_->Pull(options_.table, s.dim, index_.ids,
                              row_values_.data(), step));
  EmbeddingMlp::Batch b;
  b.size = count;
  b.labels = labels_.data();
  b.dense = dense_dev_.get();
  b.row_values = row_values_dev_.get();
  backend_->CopyToDevice(dense_.data(), dense_dev_.get(),
                         int64_t{count} * s.dense);
  backend_->CopyToDevice(row_values_.data(), row_values_dev_.get(),
                         int64_t{index_.rows()} * s.dim);
  index_on_backend_.Place(index_, &b);
  return b;
}

absl::StatusOr<double> CtrWorkload::ComputeGradient(
    int64_t step, absl::Span<const int64_t> samples, const float* params,
    float* grads, const GradientReady& ready) {
  const int count = static_cast<int>(samples.size());
  ASSIGN_OR_RETURN(const EmbeddingMlp::Batch b,
                   Prepare(*train_, samples.data(), 0, count, step));
  const double loss = model_->ForwardBackward(params, b, grads,
                                              row_grads_dev_.get(), ready);
  const int64_t n = int64_t{b.rows} * options_.shape.dim;
  backend_->CopyToHost(row_grads_dev_.get(), row_grads_.data(), n);
  RETURN_IF_ERROR(backend_->status());
  // The index's distinct ids and counts are the push's, as they are.
  RETURN_IF_ERROR(rows_->PushSummed(
      options_.table, options_.shape.dim, step, index_.ids, index_.counts,
      absl::MakeConstSpan(row_grads_.data(), n)));
  return loss;
}

absl::Status CtrWorkload::EmptyStep(int64_t step) {
  if (rows_ == nullptr)
    return absl::FailedPreconditionError("no generation joined");
  return rows_->PushSummed(options_.table, options_.shape.dim, step, {}, {},
                          {});
}

absl::StatusOr<Evaluation> CtrWorkload::Evaluate(const float* params) {
  ASSIGN_OR_RETURN(const ClickLogs* test, load_test_());
  logits_.resize(test->count);
  for (int64_t first = 0; first < test->count; first += options_.eval_batch) {
    const int count = static_cast<int>(
        std::min<int64_t>(options_.eval_batch, test->count - first));
    ASSIGN_OR_RETURN(const EmbeddingMlp::Batch b,
                     Prepare(*test, nullptr, first, count, /*step=*/-1));
    model_->Predict(params, b, logits_.data() + first);
  }
  RETURN_IF_ERROR(backend_->status());
  return Evaluation{Auc(logits_, test->labels), LogLoss(logits_, test->labels)};
}

}  // namespace fulcrum
