#include "worker/trainer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/config/confined_path.h"
#include "common/config/model_layout.h"
#include "common/status/status_macros.h"
#include "common/tensor/layout.h"
#include "worker/image_workload.h"
#include "worker/training_run.h"

namespace fulcrum {

absl::StatusOr<const LabeledImages*> Trainer::Load(const v1::DatasetSpec& d,
                                                   bool train, int classes) {
  const std::string prefix = train ? "train" : "t10k";
  const int64_t limit = train ? d.train_limit() : d.test_limit();
  // Confined to the worker's --data_root (empty: as given, in tests).
  std::string dir = d.dir();
  if (!options_.data_root.empty()) {
    ASSIGN_OR_RETURN(dir,
                     ResolveConfined(options_.data_root, d.dir(), "dataset.dir"));
  }
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

absl::Status Trainer::Prepare(const v1::JobSpec& spec) {
  return LoadTrain(spec).status();
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
  const int eval_batch = std::max(batch, options_.eval_batch);
  // Loaded already when this worker prepared to join.
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
  Options options = options_;
  options.worker_id = worker_id_;
  ASSIGN_OR_RETURN(std::unique_ptr<TrainingRun> run,
                   TrainingRun::Create(backend_, channels_, link, options,
                                       assignment, std::move(layout),
                                       make_workload));
  return run->Run();
}

}  // namespace fulcrum
