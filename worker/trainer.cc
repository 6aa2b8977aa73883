#include "worker/trainer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/config/confined_path.h"
#include "common/config/model_layout.h"
#include "common/status/status_macros.h"
#include "common/tensor/layout.h"
#include "worker/ctr_workload.h"
#include "worker/image_workload.h"
#include "worker/training_run.h"

namespace fulcrum {

absl::StatusOr<const LabeledImages*> Trainer::Load(const v1::DatasetSpec& d,
                                                   bool train, int classes) {
  const std::string prefix = train ? "train" : "t10k";
  const int64_t limit = train ? d.train_limit() : d.test_limit();
  ASSIGN_OR_RETURN(const std::string dir, DatasetDir(d));
  const std::string key =
      absl::StrCat(dir, "|", prefix, "|", limit, "|", classes);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.get();
  ASSIGN_OR_RETURN(LabeledImages data,
                   LoadIdxSplit(dir, prefix, limit, classes));
  auto owned = std::make_unique<LabeledImages>(std::move(data));
  const LabeledImages* raw = owned.get();
  cache_[key] = std::move(owned);
  return raw;
}

absl::StatusOr<std::string> Trainer::DatasetDir(
    const v1::DatasetSpec& d) const {
  // Confined to the worker's --data_root (empty: as given, in tests).
  if (options_.data_root.empty()) return d.dir();
  return ResolveConfined(options_.data_root, d.dir(), "dataset.dir");
}

absl::StatusOr<const ClickLogs*> Trainer::LoadClicks(const v1::DatasetSpec& d,
                                                     bool train) {
  const int64_t limit = train ? d.train_limit() : d.test_limit();
  ASSIGN_OR_RETURN(const std::string dir, DatasetDir(d));
  const std::string key = absl::StrCat(dir, "|", train, "|", limit);
  auto it = clicks_.find(key);
  if (it != clicks_.end()) return it->second.get();
  ASSIGN_OR_RETURN(ClickLogs logs, LoadCriteoSplit(dir, train, limit));
  auto owned = std::make_unique<ClickLogs>(std::move(logs));
  const ClickLogs* raw = owned.get();
  clicks_[key] = std::move(owned);
  return raw;
}

absl::Status Trainer::Prepare(const v1::JobSpec& spec) {
  if (spec.model().type() == "embedding_mlp")
    return LoadClicks(spec.dataset(), true).status();
  return LoadTrain(spec).status();
}

absl::StatusOr<std::unique_ptr<Workload>> Trainer::CtrWorkloadFor(
    const v1::JobSpec& spec, const ParameterLayout* layout) {
  ASSIGN_OR_RETURN(const ClickLogs* train, LoadClicks(spec.dataset(), true));
  CtrWorkload::Options o;
  o.table = spec.model().table();
  ASSIGN_OR_RETURN(o.shape, EmbeddingMlpShapeOf(spec));
  o.batch = spec.batch_size();
  o.eval_batch = EvalBatch(spec);
  o.rows.timeout = options_.step_timeout;
  auto load_test = [this, dataset = spec.dataset()] {
    return LoadClicks(dataset, false);
  };
  return CtrWorkload::Create(backend_, layout, train, load_test, channels_,
                             std::move(o));
}

absl::StatusOr<const LabeledImages*> Trainer::LoadTrain(
    const v1::JobSpec& spec) {
  if (spec.model().layers_size() < 2) {
    return absl::InvalidArgumentError("model.layers needs at least 2 sizes");
  }
  const int inputs = spec.model().layers(0);
  const int classes = spec.model().layers(spec.model().layers_size() - 1);
  ASSIGN_OR_RETURN(const LabeledImages* train,
                   Load(spec.dataset(), true, classes));
  if (train->images.rows * train->images.cols != inputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[0] is ", inputs, " but the images have ",
        train->images.rows * train->images.cols, " pixels"));
  }
  return train;
}

absl::StatusOr<TrainResult> Trainer::Run(const Assignment& assignment,
                                         JobLink* link) {
  const v1::JobSpec& spec = assignment.spec;
  ASSIGN_OR_RETURN(ParameterLayout layout, LayoutForSpec(spec));
  TrainingRun::WorkloadFactory make_workload;
  const int batch = spec.batch_size();
  const int eval_batch = EvalBatch(spec);
  // The data is loaded already when this worker prepared to join.
  if (spec.model().type() == "embedding_mlp") {
    make_workload = [this, &spec](const ParameterLayout* layout) {
      return CtrWorkloadFor(spec, layout);
    };
  } else {
    ASSIGN_OR_RETURN(const LabeledImages* train, LoadTrain(spec));
    const int classes = spec.model().layers(spec.model().layers_size() - 1);
    make_workload = [this, spec, train, classes, batch, eval_batch](
                        const ParameterLayout* layout)
        -> absl::StatusOr<std::unique_ptr<Workload>> {
      auto load_test = [this, dataset = spec.dataset(), classes] {
        return Load(dataset, false, classes);
      };
      return ImageWorkload::Create(backend_, layout, train, load_test, batch,
                                   eval_batch);
    };
  }
  Options options = options_;
  options.worker_id = worker_id_;
  ASSIGN_OR_RETURN(std::unique_ptr<TrainingRun> run,
                   TrainingRun::Create(backend_, channels_, link, options,
                                       assignment, std::move(layout),
                                       make_workload));
  return run->Run();
}

}  // namespace fulcrum
