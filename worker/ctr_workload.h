// The embedding_mlp model on Criteo click logs (docs/embeddings.md, "From
// fulcrum-worker"). Each step: the batch's ids are made distinct
// (BagIndexer), their rows pulled from the shards (RowClient; with the
// table's staleness bound, at this step), the model runs forward and
// backward on the backend (EmbeddingMlp: the dense gradient goes out
// through `ready` as backward completes it), and the rows' gradients,
// summed per distinct id with their occurrence counts, are pushed before
// the step ends. A worker with no samples at a step still pushes to every
// shard (the table's clocks). Evaluation: the test split's AUC (the job's
// accuracy) and log-loss, rows pulled without waiting.
//
// Thread safety: none; the training thread owns it.
#ifndef FULCRUM_WORKER_CTR_WORKLOAD_H_
#define FULCRUM_WORKER_CTR_WORKLOAD_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/embedding/sparse_batch.h"
#include "worker/backend/device_buffer.h"
#include "worker/data/criteo.h"
#include "worker/model/backend_bag_index.h"
#include "worker/model/bag_index.h"
#include "worker/model/embedding_mlp.h"
#include "worker/row_client.h"
#include "worker/workload.h"

namespace fulcrum {

class CtrWorkload : public Workload {
 public:
  using TestLoader = std::function<absl::StatusOr<const ClickLogs*>()>;
  struct Options {
    std::string table;  // model.table
    EmbeddingMlpShape shape;
    int batch = 256;
    int eval_batch = 1000;
    RowClient::Options rows;  // shards, chunk_bytes, timeout
  };

  // `backend`, `layout`, `train` and `channels` are not owned and must
  // outlive it. Fails with the backend's status when its buffers cannot
  // be had, or the model's when the layout is not the shape's.
  static absl::StatusOr<std::unique_ptr<CtrWorkload>> Create(
      Backend* backend, const ParameterLayout* layout, const ClickLogs* train,
      TestLoader load_test, ChannelFactory* channels, Options options);
  ~CtrWorkload() override;

  int64_t TrainSize() const override { return train_->count; }
  absl::Status StartGeneration(const ChannelOptions& options) override;
  absl::StatusOr<double> ComputeGradient(int64_t step,
                                         absl::Span<const int64_t> samples,
                                         const float* params, float* grads,
                                         const GradientReady& ready) override;
  absl::Status EmptyStep(int64_t step) override;
  absl::StatusOr<Evaluation> Evaluate(const float* params) override;

 private:
  CtrWorkload(Backend* backend, const ClickLogs* train, TestLoader load_test,
              ChannelFactory* channels, Options options);
  // Samples `rows_of` (count of them) of `logs` into the host buffers, the
  // bag index built, their rows pulled (at `step`; < 0: no wait) and
  // everything copied to the backend: the model's batch.
  absl::StatusOr<EmbeddingMlp::Batch> Prepare(const ClickLogs& logs,
                                              const int64_t* rows_of,
                                              int64_t first, int count,
                                              int64_t step);

  Backend* const backend_;            // Not owned.
  const ClickLogs* const train_;      // Not owned.
  const TestLoader load_test_;
  ChannelFactory* const channels_;    // Not owned.
  const Options options_;
  const int max_batch_;               // max(batch, eval_batch)
  const int64_t max_bags_;
  std::unique_ptr<EmbeddingMlp> model_;
  std::unique_ptr<RowChannel> row_channel_;  // this generation's
  std::unique_ptr<RowClient> rows_;
  // Host buffers (the CPU backend computes on them directly).
  std::vector<float> dense_, labels_, row_values_, row_grads_;
  std::vector<uint64_t> ids_;
  std::vector<int32_t> offsets_;  // 0, 1, ..., bags: one id a bag
  BagIndexer indexer_;
  BagIndex index_;
  DeviceBuffer dense_dev_, row_values_dev_, row_grads_dev_;
  BackendBagIndex index_on_backend_;
  std::vector<float> logits_;   // evaluation
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_CTR_WORKLOAD_H_
