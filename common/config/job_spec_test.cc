#include "common/config/job_spec.h"
#include "common/config/model_layout.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

constexpr char kValid[] = R"(
name: fmnist-mlp
model: {type: mlp, layers: [784, 256, 128, 10], activation: relu}
dataset: {format: idx, dir: /data}
optimizer: {type: momentum, lr: 0.05, momentum: 0.9, weight_decay: 0.0}
consistency: {mode: sync}
batch_size: 64
epochs: 10
workers: {min: 1, max: 4}
shards: 2
seed: 1
target_accuracy: 0.89
)";

// Parses kValid with one line replaced/added and returns the validation error.
absl::Status ErrorWith(const std::string& extra) {
  const std::string key = extra.substr(0, extra.find(':') + 1);
  std::string doc;
  std::istringstream lines(kValid);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(key, 0) != 0) doc += line + "\n";
  }
  auto spec = ParseJobSpec(doc + extra);
  if (!spec.ok()) return spec.status();
  return ValidateJobSpec(*spec);
}

TEST(JobSpecTest, ParsesTheReferenceJob) {
  auto spec = ParseJobSpec(kValid);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(spec->name(), "fmnist-mlp");
  EXPECT_EQ(spec->model().layers_size(), 4);
  EXPECT_EQ(spec->model().layers(1), 256);
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 0.05);
  EXPECT_EQ(spec->workers().max(), 4);
  EXPECT_EQ(spec->shards(), 2);
  EXPECT_EQ(spec->seed(), 1u);
  // Defaults.
  EXPECT_EQ(spec->partition_bytes(), kDefaultPartitionBytes);
  EXPECT_EQ(spec->chunk_bytes(), kDefaultChunkBytes);
  EXPECT_EQ(spec->wire().gradients(), v1::ENCODING_FP32);
  EXPECT_EQ(spec->wire().parameters(), v1::ENCODING_FP32);
}

TEST(JobSpecTest, WireEncodings) {
  auto spec = ParseJobSpec(std::string(kValid) +
                           "wire: {gradients: bf16, parameters: bf16}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->wire().gradients(), v1::ENCODING_BF16);
  EXPECT_EQ(spec->wire().parameters(), v1::ENCODING_BF16);
  // The old name of wire.gradients.
  spec = ParseJobSpec(std::string(kValid) + "encoding: fp16\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->wire().gradients(), v1::ENCODING_FP16);
  EXPECT_EQ(spec->encoding(), v1::ENCODING_UNSPECIFIED);
  // Sent as a proto (SubmitJob), an unknown value of the old field, or one
  // that disagrees with wire.gradients, is refused naming it (it was
  // dropped without a word).
  for (int bad : {7, 2}) {
    v1::JobSpec s = *ParseJobSpec(kValid);
    s.mutable_wire()->set_gradients(v1::ENCODING_FP16);
    s.set_encoding(static_cast<v1::Encoding>(bad));
    ApplyDefaults(&s);
    const absl::Status st = ValidateJobSpec(s);
    EXPECT_EQ(st.message(),
              absl::StrCat("encoding (the old name of wire.gradients) must be "
                           "fp32, bf16 or fp16 and agree with wire.gradients, "
                           "got ", bad))
        << st;
  }
  spec = ParseJobSpec(std::string(kValid) +
                      "wire: {topk: 0.01, topk_warmup_steps: 500}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(spec->wire().topk(), 0.01);
  EXPECT_EQ(spec->wire().topk_warmup_steps(), 500);
  EXPECT_EQ(spec->wire().sparse_min_bytes(), 16384);  // the default
  EXPECT_FALSE(PreReduce(*spec));  // off unless asked
  auto pre_reduced =
      ParseJobSpec(std::string(kValid) + "wire: {pre_reduce: true}\n");
  ASSERT_TRUE(pre_reduced.ok()) << pre_reduced.status();
  EXPECT_TRUE(pre_reduced->wire().pre_reduce());
  EXPECT_TRUE(PreReduce(*pre_reduced));
  EXPECT_TRUE(ValidateJobSpec(*pre_reduced).ok());
  // kValid's optimizer is momentum: with topk it runs on the workers,
  // unless the job says otherwise.
  EXPECT_TRUE(MomentumOnWorkers(*spec));
  spec->mutable_wire()->set_momentum_correction(false);
  EXPECT_FALSE(MomentumOnWorkers(*spec));
  spec->mutable_wire()->clear_momentum_correction();
  spec->mutable_wire()->set_topk(0);
  EXPECT_FALSE(MomentumOnWorkers(*spec));
  spec = ParseJobSpec(std::string(kValid) +
                      "wire: {topk: 0.01, momentum_correction: false}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(MomentumOnWorkers(*spec));
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  // Random-k: the same fraction, the same momentum correction.
  spec = ParseJobSpec(std::string(kValid) + "wire: {randomk: 0.05}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(spec->wire().randomk(), 0.05);
  EXPECT_DOUBLE_EQ(SparseFraction(*spec), 0.05);
  EXPECT_TRUE(MomentumOnWorkers(*spec));
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  spec->mutable_wire()->set_randomk(0);
  EXPECT_DOUBLE_EQ(SparseFraction(*spec), 0.0);
  EXPECT_FALSE(MomentumOnWorkers(*spec));
}

TEST(JobSpecTest, ParsesJson) {
  auto spec =
      ParseJobSpec(R"({"name": "j", "model": {"type": "mlp", "layers": [4, 2]},
      "dataset": {"dir": "/d"}, "optimizer": {"type": "sgd", "lr": 0.1}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(spec->workers().min(), 1);
  EXPECT_EQ(spec->consistency().mode(), "sync");
}

TEST(JobSpecTest, ParsesOptimizerSuiteAndConsistencyModes) {
  auto spec = ParseJobSpec(std::string(kValid).replace(
      std::string(kValid).find("optimizer:"),
      std::string("optimizer: {type: momentum, lr: 0.05, momentum: 0.9, "
                  "weight_decay: 0.0}")
          .size(),
      "optimizer: {type: adamw, lr: 0.001, beta1: 0.8, beta2: 0.99, eps: 1e-6, "
      "weight_decay: 0.01, "
      "schedule: {type: cosine, warmup_steps: 100, total_steps: 1000, min_lr: "
      "0.0001}}"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(spec->optimizer().type(), "adamw");
  EXPECT_DOUBLE_EQ(spec->optimizer().beta1(), 0.8);
  EXPECT_DOUBLE_EQ(spec->optimizer().eps(), 1e-6);
  EXPECT_EQ(spec->optimizer().schedule().type(), "cosine");
  EXPECT_EQ(spec->optimizer().schedule().total_steps(), 1000);
  for (const char* mode : {"consistency: {mode: ssp, staleness: 3}",
                           "consistency: {mode: async}"}) {
    EXPECT_TRUE(ErrorWith(mode).ok()) << mode << ": " << ErrorWith(mode);
  }
}

TEST(JobSpecTest, ShippedExampleIsValid) {
  std::ifstream in("examples/fashion_mnist_mlp.yaml");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  auto spec = ParseJobSpec(ss.str());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST(JobSpecTest, ErrorsNameTheField) {
  struct Case {
    std::string yaml, message;
  };
  const Case cases[] = {
      {"optimizer: {type: momentum, lr: -1}",
       "optimizer.lr must be > 0, got -1"},
      {"optimizer: {type: momentum, lr: 0}", "optimizer.lr must be > 0, got 0"},
      {"optimizer: {type: adam}",
       "optimizer.lr is missing: optimizer.type adam needs a learning rate > 0 "
       "(e.g. lr: 0.01)"},
      {"optimizer: {type: lamb, lr: 0.1}",
       "optimizer.type must be one of [sgd, momentum, nesterov, adam, adamw, "
       "average], got 'lamb'"},
      {"optimizer: {type: average, momentum: 0.9}",
       "optimizer.type average takes no hyper-parameters"},

      {"optimizer: {type: adam, lr: 0.1, momentum: 0.9}",
       "optimizer.momentum must be 0 for optimizer.type adam (use beta1)"},
      {"optimizer: {type: nesterov, lr: 0.1}",
       "optimizer.momentum must be > 0 for optimizer.type nesterov"},
      {"optimizer: {type: adam, lr: 0.1, beta2: 1.0}",
       "optimizer.beta2 must be in [0, 1), got 1"},
      {"optimizer: {type: adam, lr: 0.1, eps: 0}",
       "optimizer.eps must be > 0, got 0"},
      {"optimizer: {type: sgd, lr: 0.1, on_nonfinite: ignore}",
       "optimizer.on_nonfinite must be one of [drop_worker, fail_job], got "
       "'ignore'"},
      {"optimizer: {type: momentum, lr: 0.1, beta1: 0.9}",
       "beta1/beta2/eps apply to adam and adamw only"},
      {"optimizer: {type: sgd, lr: 0.1, schedule: {type: linear}}",
       "optimizer.schedule.type must be one of [constant, step, cosine], got "
       "'linear'"},
      {"optimizer: {type: sgd, lr: 0.1, schedule: {type: cosine}}",
       "optimizer.schedule.total_steps must be >= 1 for a cosine schedule, got "
       "0"},
      {"optimizer: {type: sgd, lr: 0.1, schedule: {type: step, step_size: 10, "
       "gamma: 2}}",
       "optimizer.schedule.gamma must be in (0, 1]"},
      {"optimizer: {type: sgd, lr: 0.1, schedule: {warmup_steps: -1}}",
       "optimizer.schedule.warmup_steps must be >= 0, got -1"},
      {"optimizer: {type: sgd, lr: 0.1, schedule: {bogus: 1}}",
       "unknown field 'optimizer.schedule.bogus'"},
      {"checkpoint: {every_steps: 100}",
       "checkpoint.dir must be set when checkpoint.every_steps > 0"},
      {"checkpoint: {every_steps: -1}",
       "checkpoint.every_steps must be >= 0, got -1"},
      {"checkpoint: {every_steps: 10, dir: /c, keep: 0}",
       "checkpoint.keep must be >= 1, got 0"},
      {"checkpoint: {every_steps: 10, dir: /c, period: 3}",
       "unknown field 'checkpoint.period'"},
      {"consistency: {mode: ssp, staleness: -1}",
       "consistency.staleness must be in [0, 1000], got -1"},
      {"consistency: {mode: sync, staleness: 2}",
       "consistency.staleness applies to mode ssp only (mode is sync), got 2"},
      {"optimizer: {type: momentum, lr: abc}",
       "optimizer.lr must be a number, got 'abc'"},
      {"optimizer: {type: momentum, lr: 0.1, momentum: 1.5}",
       "optimizer.momentum must be in [0, 1)"},
      {"batch_size: 0", "batch_size must be in [1, 65536], got 0"},
      {"epochs: -2", "epochs must be >= 1, got -2"},
      {"workers: {min: 3, max: 2}",
       "workers.max must be >= workers.min (3), got 2"},
      {"workers: {min: 0, max: 2}", "workers.min must be >= 1, got 0"},
      {"shards: 0", "shards must be in [1, 256], got 0"},
      {"consistency: {mode: bogus}",
       "consistency.mode must be one of [sync, ssp, async], got 'bogus'"},
      {"model: {type: mlp, layers: [784, -5, 10]}",
       "model.layers[1] must be in [1, 65536], got -5"},
      {"model: {type: cnn, layers: [784, 10]}",
       "model.type must be one of [mlp, embedding_mlp, external], got 'cnn'"},
      {"model: {type: external, layers: [784, 10]}",
       "model.layers must be empty for an external model"},
      {"model: {type: external, tensors: [{name: a, shape: [2]}, "
       "{name: a, shape: [3]}]}",
       "model.tensors[1].name 'a' is declared twice"},
      {"model: {type: external, tensors: [{name: w, shape: [4, 0]}]}",
       "model.tensors[0].shape[1] must be in [1, 2^32], got 0"},
      {"model: {type: external, tensors: [{name: w, shape: [65536, 65536]}]}",
       "model.tensors hold more than 1073741824 elements (w)"},
      {"model: {type: mlp, layers: [4, 2], tensors: [{name: w, shape: [2]}]}",
       "model.tensors apply to model.type external only"},
      {"model: {type: mlp, layers: [784, x]}",
       "model.layers[1] must be an integer, got 'x'"},
      {"target_accuracy: 1.5", "target_accuracy must be in [0, 1], got 1.5"},
      {"chunk_bytes: 1000", "chunk_bytes must be a multiple of 4"},
      {"bogus_key: 1", "unknown field 'bogus_key'"},
      {"optimizer: {type: momentum, lr: 0.1, betas: 3}",
       "unknown field 'optimizer.betas'"},
      {"dataset: {format: csv, dir: /d}",
       "dataset.format must be idx for model.type mlp, got 'csv'"},
      {"dataset: {format: idx, dir: ''}", "dataset.dir must not be empty"},
      {"dataset: {dir: /d, sharding: rows}",
       "dataset.sharding must be one of [chunks, static], got 'rows'"},
      {"dataset: {dir: /d, chunk_size: 0}",
       "dataset.chunk_size must be >= 1, got 0"},
      {"dataset: {dir: /d, size: -1}", "dataset.size must be >= 0, got -1"},
      {"model: {type: mlp, layers: [65536, 65536, 65536]}",
       "model.layers make a model of more than 1073741824 parameters (4 GiB "
       "of fp32)"},
      {"dataset: {dir: /d, size: 500, train_limit: 400}",
       "dataset.size 500 is above dataset.train_limit 400"},
      {"dataset: {dir: /d, size: 1125899906842624, chunk_size: 512}",
       "dataset.size 1125899906842624 makes more than 262144 chunks an epoch "
       "at dataset.chunk_size 512: raise dataset.chunk_size to at least "
       "4294967296"},
      {"encoding: int8",
       "encoding must be one of [fp32, bf16, fp16], got 'int8'"},
      {"wire: {gradients: fp8}",
       "wire.gradients must be one of [fp32, bf16, fp16], got 'fp8'"},
      {"wire: {parameters: fp16}", "wire.parameters must be fp32 or bf16"},
      {"wire: {params: bf16}", "wire.params"},
      {"wire: {topk: 1.5}", "wire.topk must be in (0, 1]"},
      {"wire: {topk: -0.1}", "wire.topk must be in (0, 1]"},
      {"wire: {topk: lots}", "wire.topk"},
      {"wire: {topk: 0.01, topk_warmup_steps: -1}",
       "wire.topk_warmup_steps must be >= 0, got -1"},
      {"consistency: {mode: async}\nwire: {pre_reduce: true}",
       "wire.pre_reduce needs consistency.mode sync"},
      {"wire: {pre_reduce: true, topk: 0.01}",
       "wire.pre_reduce cannot be combined with wire.topk"},
      {"wire: {pre_reduce: often}", "wire.pre_reduce"},
      {"wire: {randomk: 2}", "wire.randomk must be in (0, 1]"},
      {"wire: {topk: 0.01, sparse_min_bytes: -4}",
       "wire.sparse_min_bytes must be in [0, 1073741824], got -4"},
      {"wire: {randomk: some}", "wire.randomk"},
      {"wire: {randomk: 0.01, topk: 0.01}",
       "wire.randomk cannot be combined with wire.topk"},
      {"wire: {pre_reduce: true, randomk: 0.01}",
       "wire.pre_reduce cannot be combined with wire.randomk"},
      {"name: ''", "name must not be empty"},
  };
  for (const Case& c : cases) {
    absl::Status s = ErrorWith(c.yaml);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << c.yaml << " -> " << s.message();
  }
}

// An external model: declared by its workers, so no layers and no dataset
// directory; tensors may come with the spec.
TEST(JobSpecTest, ExternalModelsNeedNoLayersOrDataset) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      "name: cnn\nmodel: {type: external, tensors: [{name: conv1.weight, "
      "shape: [32, 1, 3, 3]}, {name: conv1.bias, shape: [32]}]}\n"
      "optimizer: {type: momentum, lr: 0.05, momentum: 0.9}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  ASSERT_EQ(spec->model().tensors_size(), 2);
  EXPECT_EQ(spec->model().tensors(0).shape_size(), 4);
  EXPECT_EQ(spec->dataset().format(), "") << "no idx default for external";
  spec = ParseJobSpec("name: later\nmodel: {type: external}\n"
                      "optimizer: {type: average}\n");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  spec->mutable_consistency()->set_mode("async");
  EXPECT_EQ(ValidateJobSpec(*spec).message(),
            "optimizer.type average needs consistency.mode sync (every worker "
            "applies the same averaged gradient)");
}

// Every float field rejects NaN and infinities (each was checked on its
// own; eps: +inf passed before).
TEST(JobSpecTest, EveryFloatFieldRejectsNanAndInfinity) {
  const char* fields[] = {
      "optimizer: {type: adam, lr: X}",
      "optimizer: {type: momentum, lr: 0.1, momentum: X}",
      "optimizer: {type: momentum, lr: 0.1, momentum: 0.9, weight_decay: X}",
      "optimizer: {type: adam, lr: 0.1, beta1: X}",
      "optimizer: {type: adam, lr: 0.1, beta2: X}",
      "optimizer: {type: adam, lr: 0.1, eps: X}",
      "optimizer: {type: sgd, lr: 0.1, schedule: {type: step, step_size: 1, "
      "gamma: X}}",
      "optimizer: {type: sgd, lr: 0.1, schedule: {type: cosine, total_steps: "
      "9, min_lr: X}}",
      "target_accuracy: X",
  };
  for (const char* f : fields) {
    for (const char* bad : {".nan", ".inf", "-.inf"}) {
      std::string yaml = f;
      yaml.replace(yaml.find('X'), 1, bad);
      absl::Status s = ErrorWith(yaml);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << yaml;
    }
  }
  EXPECT_NE(ErrorWith("optimizer: {type: adam, lr: 0.1, eps: .inf}")
                .message()
                .find("optimizer.eps must be > 0, got inf"),
            std::string::npos);
}

// Strings: never empty when written, bounded in length, and an error
// quotes at most a short prefix of what was sent.
TEST(JobSpecTest, StringsAreBoundedAndErrorsQuoteAShortPrefix) {
  absl::Status empty = ErrorWith("optimizer: {type: '', lr: 0.1}");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("optimizer.type must not be empty"),
            std::string::npos)
      << empty;
  const std::string huge(5 << 20, 'x');  // 5 MB
  absl::Status parsed =
      ErrorWith("model: {type: " + huge + ", layers: [784, 10]}");
  EXPECT_EQ(parsed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.message().find("model.type must be at most 4096 bytes, got "
                                  "5242880"),
            std::string::npos)
      << parsed.message().substr(0, 200);
  EXPECT_LT(parsed.message().size(), 200u);
  // An unknown value: quoted, cut at 64 characters.
  absl::Status named = ErrorWith("model: {type: " + std::string(300, 'y') +
                                 ", layers: [784, 10]}");
  EXPECT_NE(named.message().find("yyy...' (300 bytes)"), std::string::npos)
      << named;
  EXPECT_LT(named.message().size(), 200u);
  EXPECT_LT(ErrorWith(huge + ": 1").message().size(), 200u) << "an unknown key";
  // A spec that comes as a proto (SubmitJob) is held to the same bounds.
  auto spec = ParseJobSpec(kValid);
  ASSERT_TRUE(spec.ok());
  ApplyDefaults(&*spec);
  spec->mutable_dataset()->set_dir(huge);
  absl::Status proto = ValidateJobSpec(*spec);
  EXPECT_NE(proto.message().find("dataset.dir must be at most 4096 bytes"),
            std::string::npos)
      << proto.message().substr(0, 200);
  EXPECT_LT(proto.message().size(), 200u);
}

TEST(JobSpecTest, RejectsMalformedDocuments) {
  EXPECT_EQ(ParseJobSpec("name: [unclosed").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJobSpec("- a\n- b\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJobSpec("model: 3").status().message(),
            "model must be a mapping");
  EXPECT_EQ(ParseJobSpec("epochs: 1\nepochs: 2").status().message(),
            "duplicate field 'epochs'");
}

TEST(JobSpecTest, EmbeddingMlpNamesItsTableAndReadsCriteo) {
  const std::string base =
      "name: ctr\noptimizer: {type: adam, lr: 0.001}\n"
      "embeddings: [{name: deep, dim: 8, capacity: 1000, optimizer: {lr: 0.01}}]\n";
  auto spec = ParseJobSpec(
      base + "dataset: {dir: /d}\nmodel: {type: embedding_mlp, table: deep, bottom: [16], top: [32, 8]}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->dataset().format(), "criteo");  // the model's default
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  auto layout = LayoutForSpec(*spec);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // bottom 13->16, top.0 from 26 x 8 bags + 16, 32 -> 8 -> 1.
  EXPECT_EQ(layout->total_size(),
            (13 * 16 + 16) + (32 * 208 + 32 * 16 + 32) + (8 * 32 + 8) + (8 + 1));
  EXPECT_EQ(layout->tensors()[2].name, "top.0.embedding_weight");
  EXPECT_EQ(spec->model().interaction(), "concat");  // the default
  auto dot = ParseJobSpec(base + "dataset: {dir: /d}\nmodel: {type: embedding_mlp, "
                                 "table: deep, bottom: [8], interaction: dot}\n");
  ASSERT_TRUE(dot.ok()) << dot.status();
  EXPECT_TRUE(ValidateJobSpec(*dot).ok()) << ValidateJobSpec(*dot);
  auto dot_layout = LayoutForSpec(*dot);
  ASSERT_TRUE(dot_layout.ok()) << dot_layout.status();
  EXPECT_EQ(dot_layout->tensors()[4].name, "top.0.interaction_weight");
  EXPECT_EQ(dot_layout->tensors()[4].shape, (std::vector<int64_t>{1, 27 * 26 / 2}));

  const std::pair<std::string, std::string> bad[] = {
      {"model: {type: embedding_mlp, table: wide}",
       "model.table 'wide' is not one of the job's embeddings"},
      {"model: {type: embedding_mlp}", "model.table must name"},
      {"model: {type: embedding_mlp, table: deep, bottom: [16, 0]}",
       "model.bottom[1] must be in [1, 65536]"},
      {"model: {type: embedding_mlp, table: deep, layers: [3, 1]}",
       "model.layers apply to model.type mlp / external"},
      {"model: {type: mlp, layers: [784, 10], table: deep}",
       "model.table applies to model.type embedding_mlp only"},
      {"model: {type: embedding_mlp, table: deep}\n",
       "dataset.format must be criteo for model.type embedding_mlp"},
      {"model: {type: embedding_mlp, table: deep, interaction: sum}",
       "model.interaction must be one of [concat, dot], got 'sum'"},
      {"model: {type: embedding_mlp, table: deep, bottom: [16], interaction: dot}",
       "model.bottom must end at the table's dim (8) for interaction dot"},
      {"model: {type: mlp, layers: [784, 10], interaction: dot}",
       "model.interaction applies to model.type embedding_mlp only"},
  };
  for (const auto& [yaml, want] : bad) {
    const bool idx = want.find("dataset.format") != std::string::npos;
    auto s = ParseJobSpec(base + yaml + "\n" +
                          (idx ? "dataset: {format: idx, dir: /d}\n"
                               : "dataset: {dir: /d}\n"));
    absl::Status v = s.ok() ? ValidateJobSpec(*s) : s.status();
    EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_NE(v.message().find(want), std::string::npos) << yaml << " -> " << v;
  }
}

}  // namespace
}  // namespace fulcrum
