#include "common/config/job_spec.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/embedding_spec.h"
#include "common/config/quote.h"
#include "common/config/yaml_fields.h"
#include "common/dataplane/payload.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace fulcrum {
namespace {

using v1::JobSpec;

using config::Bad;
using config::Handler;
using config::Read;
using config::ReadMap;
using config::Scalar;
using config::Str;

absl::Status ParseRoot(const YAML::Node& root, JobSpec* spec) {
  auto* m = spec->mutable_model();
  auto* d = spec->mutable_dataset();
  auto* o = spec->mutable_optimizer();
  auto* c = spec->mutable_consistency();
  auto* w = spec->mutable_workers();
  // A list of integers into `add`.
  const auto ints = [](std::function<void(int)> add) -> Handler {
    return [add](const YAML::Node& n, const std::string& f) -> absl::Status {
      if (!n.IsSequence()) return Bad(f, "must be a list of integers");
      for (size_t i = 0; i < n.size(); ++i) {
        int v = 0;
        absl::Status s =
            Read<int>(n[i], absl::StrCat(f, "[", i, "]"), "an integer", &v);
        if (!s.ok()) return s;
        add(v);
      }
      return absl::OkStatus();
    };
  };
  const std::map<std::string, Handler> model = {
      {"type", Str(m->mutable_type())},
      {"activation", Str(m->mutable_activation())},
      {"layers", ints([m](int v) { m->add_layers(v); })},
      {"table", Str(m->mutable_table())},
      {"interaction", Str(m->mutable_interaction())},
      {"bottom", ints([m](int v) { m->add_bottom(v); })},
      {"top", ints([m](int v) { m->add_top(v); })},
      {"tensors",
       [m](const YAML::Node& n, const std::string& f) -> absl::Status {
         if (!n.IsSequence())
           return Bad(f, "must be a list of {name, shape}");
         for (size_t i = 0; i < n.size(); ++i) {
           const std::string at = absl::StrCat(f, "[", i, "]");
           if (!n[i].IsMap() || !n[i]["name"] || !n[i]["shape"] ||
               !n[i]["shape"].IsSequence())
             return Bad(at, "must be {name: ..., shape: [...]}");
           v1::TensorSpec* t = m->add_tensors();
           t->set_name(n[i]["name"].as<std::string>(""));
           for (size_t d = 0; d < n[i]["shape"].size(); ++d) {
             int64_t v = 0;
             RETURN_IF_ERROR(Read<int64_t>(n[i]["shape"][d],
                                           absl::StrCat(at, ".shape[", d, "]"),
                                           "an integer", &v));
             t->add_shape(v);
           }
         }
         return absl::OkStatus();
       }},
  };
  const std::map<std::string, Handler> dataset = {
      {"format", Str(d->mutable_format())},
      {"dir", Str(d->mutable_dir())},
      {"train_limit",
       Scalar<int64_t>("an integer",
                       [d](int64_t v) { d->set_train_limit(v); })},
      {"test_limit",
       Scalar<int64_t>("an integer", [d](int64_t v) { d->set_test_limit(v); })},
      {"sharding", Str(d->mutable_sharding())},
      {"chunk_size",
       Scalar<int64_t>("an integer", [d](int64_t v) { d->set_chunk_size(v); })},
      {"size", Scalar<int64_t>("an integer", [d](int64_t v) { d->set_size(v); })},
  };
  const std::map<std::string, Handler> optimizer = {
      {"type", Str(o->mutable_type())},
      {"lr", Scalar<double>("a number", [o](double v) { o->set_lr(v); })},
      {"momentum",
       Scalar<double>("a number", [o](double v) { o->set_momentum(v); })},
      {"weight_decay",
       Scalar<double>("a number", [o](double v) { o->set_weight_decay(v); })},
      {"beta1", Scalar<double>("a number", [o](double v) { o->set_beta1(v); })},
      {"beta2", Scalar<double>("a number", [o](double v) { o->set_beta2(v); })},
      {"eps", Scalar<double>("a number", [o](double v) { o->set_eps(v); })},
      {"on_nonfinite", Str(o->mutable_on_nonfinite())},
      {"schedule",
       [o](const YAML::Node& n, const std::string& f) {
         auto* sc = o->mutable_schedule();
         const std::map<std::string, Handler> schedule = {
             {"type", Str(sc->mutable_type())},
             {"warmup_steps",
              Scalar<int64_t>("an integer",
                              [sc](int64_t v) { sc->set_warmup_steps(v); })},
             {"step_size",
              Scalar<int64_t>("an integer",
                              [sc](int64_t v) { sc->set_step_size(v); })},
             {"gamma",
              Scalar<double>("a number", [sc](double v) { sc->set_gamma(v); })},
             {"total_steps",
              Scalar<int64_t>("an integer",
                              [sc](int64_t v) { sc->set_total_steps(v); })},
             {"min_lr", Scalar<double>("a number",
                                       [sc](double v) { sc->set_min_lr(v); })},
         };
         return ReadMap(n, f, schedule);
       }},
  };
  const std::map<std::string, Handler> consistency = {
      {"mode", Str(c->mutable_mode())},
      {"staleness",
       Scalar<int>("an integer", [c](int v) { c->set_staleness(v); })},
  };
  auto* ck = spec->mutable_checkpoint();
  const std::map<std::string, Handler> checkpoint = {
      {"every_steps",
       Scalar<int64_t>("an integer",
                       [ck](int64_t v) { ck->set_every_steps(v); })},
      {"dir", Str(ck->mutable_dir())},
      {"keep", Scalar<int>("an integer", [ck](int v) { ck->set_keep(v); })},
      {"full_every",
       Scalar<int>("an integer", [ck](int v) { ck->set_full_every(v); })},
  };
  // fp32 | bf16 | fp16 (payload.h's names) as a fulcrum.v1.Encoding.
  auto encoding = [](std::function<void(v1::Encoding)> set) -> Handler {
    return [set](const YAML::Node& n, const std::string& f) -> absl::Status {
      std::string v;
      absl::Status s = Read<std::string>(n, f, "a string", &v);
      if (!s.ok()) return s;
      absl::StatusOr<WireEncoding> e = ParseEncoding(v, f);
      if (!e.ok()) return e.status();
      set(static_cast<v1::Encoding>(*e));
      return absl::OkStatus();
    };
  };
  auto* wi = spec->mutable_wire();
  const std::map<std::string, Handler> wire = {
      {"gradients", encoding([wi](v1::Encoding e) { wi->set_gradients(e); })},
      {"parameters",
       encoding([wi](v1::Encoding e) { wi->set_parameters(e); })},
      {"topk", Scalar<double>("a number", [wi](double v) { wi->set_topk(v); })},
      {"randomk",
       Scalar<double>("a number", [wi](double v) { wi->set_randomk(v); })},
      {"momentum_correction",
       Scalar<bool>("true or false",
                    [wi](bool v) { wi->set_momentum_correction(v); })},
      {"sparse_min_bytes",
       Scalar<int64_t>("an integer",
                       [wi](int64_t v) { wi->set_sparse_min_bytes(v); })},
      {"topk_warmup_steps",
       Scalar<int64_t>("an integer",
                       [wi](int64_t v) { wi->set_topk_warmup_steps(v); })},
      {"pre_reduce",
       Scalar<bool>("true or false", [wi](bool v) { wi->set_pre_reduce(v); })},
  };
  const std::map<std::string, Handler> workers = {
      {"min", Scalar<int>("an integer", [w](int v) { w->set_min(v); })},
      {"max", Scalar<int>("an integer", [w](int v) { w->set_max(v); })},
  };
  auto nested = config::Nested;
  const std::map<std::string, Handler> top = {
      {"name", Str(spec->mutable_name())},
      {"model", nested(model)},
      {"dataset", nested(dataset)},
      {"optimizer", nested(optimizer)},
      {"consistency", nested(consistency)},
      {"workers", nested(workers)},
      {"checkpoint", nested(checkpoint)},
      {"batch_size",
       Scalar<int>("an integer", [spec](int v) { spec->set_batch_size(v); })},
      {"epochs",
       Scalar<int>("an integer", [spec](int v) { spec->set_epochs(v); })},
      {"shards",
       Scalar<int>("an integer", [spec](int v) { spec->set_shards(v); })},
      {"seed", Scalar<uint64_t>("a non-negative integer",
                                [spec](uint64_t v) { spec->set_seed(v); })},
      {"target_accuracy",
       Scalar<double>("a number",
                      [spec](double v) { spec->set_target_accuracy(v); })},
      {"partition_bytes",
       Scalar<int64_t>("an integer",
                       [spec](int64_t v) { spec->set_partition_bytes(v); })},
      {"chunk_bytes",
       Scalar<int64_t>("an integer",
                       [spec](int64_t v) { spec->set_chunk_bytes(v); })},
      {"eval_every_steps",
       Scalar<int>("an integer",
                   [spec](int v) { spec->set_eval_every_steps(v); })},
      {"max_steps",
       Scalar<int64_t>("an integer",
                       [spec](int64_t v) { spec->set_max_steps(v); })},
      {"encoding", encoding([spec](v1::Encoding e) {
         spec->mutable_wire()->set_gradients(e);  // the old name
       })},
      {"wire", nested(wire)},
      {"embeddings", EmbeddingTablesField(spec)},
  };
  return ReadMap(root, "", top);
}

template <typename T>
std::string Got(T v) {
  return absl::StrCat(", got ", v);
}

absl::Status ValidateSchedule(const v1::OptimizerSpec& o) {
  const v1::ScheduleSpec& s = o.schedule();
  const std::string& t = s.type();
  if (t != "constant" && t != "step" && t != "cosine") {
    return Bad("optimizer.schedule.type",
               absl::StrCat("must be one of [constant, step, cosine], got ",
                            Quote(t)));
  }
  if (s.warmup_steps() < 0) {
    return Bad("optimizer.schedule.warmup_steps",
               absl::StrCat("must be >= 0", Got(s.warmup_steps())));
  }
  if (t == "step") {
    if (s.step_size() < 1) {
      return Bad(
          "optimizer.schedule.step_size",
          absl::StrCat("must be >= 1 for a step schedule", Got(s.step_size())));
    }
    if (!(s.gamma() > 0 && s.gamma() <= 1)) {
      return Bad("optimizer.schedule.gamma",
                 absl::StrCat("must be in (0, 1] for a step schedule",
                              Got(s.gamma())));
    }
  }
  if (t == "cosine") {
    if (s.total_steps() < 1) {
      return Bad("optimizer.schedule.total_steps",
                 absl::StrCat("must be >= 1 for a cosine schedule",
                              Got(s.total_steps())));
    }
    if (!(s.min_lr() >= 0 && s.min_lr() <= o.lr())) {
      return Bad("optimizer.schedule.min_lr",
                 absl::StrCat("must be in [0, optimizer.lr]", Got(s.min_lr())));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateOptimizer(const v1::OptimizerSpec& o) {
  const std::string& t = o.type();
  if (!o.on_nonfinite().empty() && o.on_nonfinite() != "drop_worker" &&
      o.on_nonfinite() != "fail_job") {
    return Bad("optimizer.on_nonfinite",
               absl::StrCat("must be one of [drop_worker, fail_job], got ",
                            Quote(o.on_nonfinite())));
  }
  const bool adam = t == "adam" || t == "adamw";
  if (t != "sgd" && t != "momentum" && t != "nesterov" && !adam &&
      t != "average") {
    return Bad("optimizer.type",
               absl::StrCat("must be one of [sgd, momentum, nesterov, adam, "
                            "adamw, average], got ",
                            Quote(t)));
  }
  if (t == "average") {  // the workers' own optimizers apply the gradient
    if (o.momentum() != 0 || o.weight_decay() != 0 || o.has_beta1() ||
        o.has_beta2() || o.has_eps()) {
      return Bad("optimizer.type",
                 "average takes no hyper-parameters (the workers' optimizer "
                 "has them)");
    }
    return absl::OkStatus();
  }
  if (!o.has_lr()) {
    return Bad("optimizer.lr",
               absl::StrCat("is missing: optimizer.type ", t,
                            " needs a learning rate > 0 (e.g. lr: 0.01)"));
  }
  if (!(o.lr() > 0) || !std::isfinite(o.lr())) {
    return Bad("optimizer.lr", absl::StrCat("must be > 0", Got(o.lr())));
  }
  if (!(o.momentum() >= 0 && o.momentum() < 1)) {
    return Bad("optimizer.momentum",
               absl::StrCat("must be in [0, 1)", Got(o.momentum())));
  }
  if ((t == "sgd" || adam) && o.momentum() != 0) {
    return Bad("optimizer.momentum",
               absl::StrCat("must be 0 for optimizer.type ", t,
                            adam ? " (use beta1)" : " (use type momentum)"));
  }
  if (t == "nesterov" && o.momentum() == 0) {
    return Bad("optimizer.momentum", "must be > 0 for optimizer.type nesterov");
  }
  if (!(o.weight_decay() >= 0) || !std::isfinite(o.weight_decay())) {
    return Bad("optimizer.weight_decay",
               absl::StrCat("must be >= 0", Got(o.weight_decay())));
  }
  if (!adam && (o.has_beta1() || o.has_beta2() || o.has_eps())) {
    return Bad("optimizer.beta1",
               "beta1/beta2/eps apply to adam and adamw only");
  }
  if (o.has_beta1() && !(o.beta1() >= 0 && o.beta1() < 1)) {
    return Bad("optimizer.beta1",
               absl::StrCat("must be in [0, 1)", Got(o.beta1())));
  }
  if (o.has_beta2() && !(o.beta2() >= 0 && o.beta2() < 1)) {
    return Bad("optimizer.beta2",
               absl::StrCat("must be in [0, 1)", Got(o.beta2())));
  }
  if (o.has_eps() && !(o.eps() > 0 && std::isfinite(o.eps()))) {
    return Bad("optimizer.eps", absl::StrCat("must be > 0", Got(o.eps())));
  }
  return ValidateSchedule(o);
}

absl::Status ValidateConsistency(const v1::ConsistencySpec& c) {
  if (c.mode() != "sync" && c.mode() != "ssp" && c.mode() != "async") {
    return Bad("consistency.mode",
               absl::StrCat("must be one of [sync, ssp, async], got ",
                            Quote(c.mode())));
  }
  if (c.staleness() < 0 || c.staleness() > 1000) {
    return Bad("consistency.staleness",
               absl::StrCat("must be in [0, 1000]", Got(c.staleness())));
  }
  if (c.mode() != "ssp" && c.staleness() != 0) {
    return Bad("consistency.staleness",
               absl::StrCat("applies to mode ssp only (mode is ", c.mode(), ")",
                            Got(c.staleness())));
  }
  return absl::OkStatus();
}

absl::Status ValidateTensors(const v1::ModelSpec& m) {
  if (m.tensors_size() > kMaxTensors) {
    return Bad("model.tensors", absl::StrCat("must have at most ", kMaxTensors,
                                             " tensors", Got(m.tensors_size())));
  }
  std::set<std::string> names;
  int64_t total = 0;
  for (int i = 0; i < m.tensors_size(); ++i) {
    const v1::TensorSpec& t = m.tensors(i);
    const std::string at = absl::StrCat("model.tensors[", i, "]");
    if (t.name().empty() || t.name().size() > 256)
      return Bad(at + ".name", "must be 1 to 256 characters");
    if (!names.insert(t.name()).second)
      return Bad(at + ".name", absl::StrCat(Quote(t.name()), " is declared twice"));
    if (t.shape_size() > 8)
      return Bad(at + ".shape", absl::StrCat("has more than 8 dimensions",
                                             Got(t.shape_size())));
    int64_t size = 1;
    for (int d = 0; d < t.shape_size(); ++d) {
      if (t.shape(d) < 1 || t.shape(d) > (int64_t{1} << 32)) {
        return Bad(absl::StrCat(at, ".shape[", d, "]"),
                   absl::StrCat("must be in [1, 2^32]", Got(t.shape(d))));
      }
      size *= t.shape(d);
      if (size > kMaxModelElements) break;
    }
    total += size;
    if (size > kMaxModelElements || total > kMaxModelElements) {
      return Bad("model.tensors",
                 absl::StrCat("hold more than ", kMaxModelElements,
                              " elements (", t.name(), ")"));
    }
  }
  return absl::OkStatus();
}

// Hidden widths of an embedding_mlp: at most 8 of [1, 65536].
absl::Status ValidateWidths(const google::protobuf::RepeatedField<int32_t>& w,
                            const std::string& field) {
  if (w.size() > 8)
    return Bad(field, absl::StrCat("must have at most 8 widths", Got(w.size())));
  for (int i = 0; i < w.size(); ++i) {
    if (w[i] <= 0 || w[i] > (1 << 16)) {
      return Bad(absl::StrCat(field, "[", i, "]"),
                 absl::StrCat("must be in [1, 65536]", Got(w[i])));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateEmbeddingMlp(const v1::ModelSpec& m) {
  if (m.layers_size() > 0 || m.tensors_size() > 0) {
    return Bad(m.layers_size() > 0 ? "model.layers" : "model.tensors",
               "apply to model.type mlp / external, not embedding_mlp (use "
               "model.bottom and model.top)");
  }
  if (m.table().empty())
    return Bad("model.table", "must name one of the job's embeddings");
  if (m.table().size() > 64)
    return Bad("model.table", "must be at most 64 characters");
  RETURN_IF_ERROR(ValidateWidths(m.bottom(), "model.bottom"));
  if (m.interaction() != "concat" && m.interaction() != "dot") {
    return Bad("model.interaction",
               absl::StrCat("must be one of [concat, dot], got ",
                            Quote(m.interaction())));
  }
  return ValidateWidths(m.top(), "model.top");
}

absl::Status ValidateModel(const v1::ModelSpec& m) {
  if (m.type() != "embedding_mlp" &&
      (!m.table().empty() || m.bottom_size() > 0 || m.top_size() > 0 ||
       !m.interaction().empty())) {
    return Bad(!m.table().empty()          ? "model.table"
               : m.bottom_size() > 0       ? "model.bottom"
               : !m.interaction().empty()  ? "model.interaction"
                                           : "model.top",
               "applies to model.type embedding_mlp only");
  }
  if (m.type() == "embedding_mlp") return ValidateEmbeddingMlp(m);
  if (m.type() == "external") {
    if (m.layers_size() > 0) {
      return Bad("model.layers",
                 "must be empty for an external model (its workers declare "
                 "its tensors)");
    }
    return ValidateTensors(m);
  }
  if (m.type() != "mlp") {
    return Bad("model.type", absl::StrCat("must be one of [mlp, embedding_mlp, external], got ",
                                          Quote(m.type())));
  }
  if (m.tensors_size() > 0)
    return Bad("model.tensors", "apply to model.type external only");
  if (m.activation() != "relu") {
    return Bad("model.activation", absl::StrCat("must be one of [relu], got ",
                                                Quote(m.activation())));
  }
  if (m.layers_size() < 2)
    return Bad("model.layers",
               absl::StrCat("needs at least 2 sizes", Got(m.layers_size())));
  for (int i = 0; i < m.layers_size(); ++i) {
    if (m.layers(i) <= 0 || m.layers(i) > (1 << 16)) {
      return Bad(absl::StrCat("model.layers[", i, "]"),
                 absl::StrCat("must be in [1, 65536]", Got(m.layers(i))));
    }
  }
  int64_t elements = 0;  // weights and biases
  for (int i = 0; i + 1 < m.layers_size() && elements <= kMaxModelElements;
       ++i) {
    elements += int64_t{m.layers(i)} * m.layers(i + 1) + m.layers(i + 1);
  }
  if (elements > kMaxModelElements) {
    return Bad("model.layers",
               absl::StrCat("make a model of more than ", kMaxModelElements,
                            " parameters (4 GiB of fp32)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpoint(const v1::JobSpec& spec) {
  const v1::CheckpointSpec& c = spec.checkpoint();
  if (c.every_steps() < 0) {
    return Bad("checkpoint.every_steps",
               absl::StrCat("must be >= 0", Got(c.every_steps())));
  }
  if (c.every_steps() == 0) return absl::OkStatus();
  if (c.dir().empty())
    return Bad("checkpoint.dir", "must be set when checkpoint.every_steps > 0");
  if (c.keep() < 1)
    return Bad("checkpoint.keep", absl::StrCat("must be >= 1", Got(c.keep())));
  if (c.full_every() < 1 || c.full_every() > 1000) {
    return Bad("checkpoint.full_every",
               absl::StrCat("must be in [1, 1000]", Got(c.full_every())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("job file is not valid YAML/JSON: ", e.what()));
  }
  JobSpec spec;
  absl::Status s;
  try {  // a conversion deep inside (a key that is a sequence, ...)
    s = ParseRoot(root, &spec);
  } catch (const YAML::Exception& e) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "job file: ", std::string(e.what()).substr(0, 200)));
  }
  if (!s.ok()) return s;
  ApplyDefaults(&spec);
  return spec;
}

void ApplyDefaults(JobSpec* spec) {
  const bool external = spec->model().type() == "external";
  const bool clicks = spec->model().type() == "embedding_mlp";
  if (spec->model().activation().empty() && !external && !clicks)
    spec->mutable_model()->set_activation("relu");
  if (spec->dataset().format().empty() && !external)
    spec->mutable_dataset()->set_format(clicks ? "criteo" : "idx");
  if (clicks && spec->model().interaction().empty())
    spec->mutable_model()->set_interaction("concat");
  if (spec->dataset().sharding().empty())
    spec->mutable_dataset()->set_sharding("chunks");
  if (spec->optimizer().type().empty())
    spec->mutable_optimizer()->set_type("momentum");
  if (spec->optimizer().on_nonfinite().empty())
    spec->mutable_optimizer()->set_on_nonfinite("drop_worker");
  if (spec->optimizer().schedule().type().empty())
    spec->mutable_optimizer()->mutable_schedule()->set_type("constant");
  if (spec->consistency().mode().empty())
    spec->mutable_consistency()->set_mode("sync");
  if (!spec->has_batch_size()) spec->set_batch_size(64);
  if (!spec->dataset().has_chunk_size() && spec->batch_size() > 0) {
    spec->mutable_dataset()->set_chunk_size(int64_t{kDefaultChunkBatches} *
                                            spec->batch_size());
  }
  if (!spec->has_epochs()) spec->set_epochs(1);
  if (!spec->workers().has_min()) spec->mutable_workers()->set_min(1);
  if (!spec->workers().has_max()) {
    spec->mutable_workers()->set_max(spec->workers().min());
  }
  if (!spec->has_shards()) spec->set_shards(1);
  if (!spec->wire().has_sparse_min_bytes())
    spec->mutable_wire()->set_sparse_min_bytes(kDefaultSparseMinBytes);
  if (!spec->has_partition_bytes())
    spec->set_partition_bytes(kDefaultPartitionBytes);
  if (!spec->has_chunk_bytes()) spec->set_chunk_bytes(kDefaultChunkBytes);
  if (!spec->has_eval_every_steps())
    spec->set_eval_every_steps(kDefaultEvalEverySteps);
  if (!spec->checkpoint().has_keep()) spec->mutable_checkpoint()->set_keep(3);
  if (!spec->checkpoint().has_full_every())
    spec->mutable_checkpoint()->set_full_every(4);
  // The old name of wire.gradients, moved there; an unknown value or one
  // that disagrees with wire.gradients stays for ValidateJobSpec to name.
  if (spec->encoding() != v1::ENCODING_UNSPECIFIED &&
      EncodingFromProto(spec->encoding(), "encoding").ok() &&
      (spec->wire().gradients() == v1::ENCODING_UNSPECIFIED ||
       spec->wire().gradients() == spec->encoding())) {
    spec->mutable_wire()->set_gradients(spec->encoding());
    spec->clear_encoding();
  }
  if (spec->wire().gradients() == v1::ENCODING_UNSPECIFIED)
    spec->mutable_wire()->set_gradients(v1::ENCODING_FP32);
  if (spec->wire().parameters() == v1::ENCODING_UNSPECIFIED)
    spec->mutable_wire()->set_parameters(v1::ENCODING_FP32);
  ApplyEmbeddingDefaults(spec);
}

absl::Status CheckDatasetSize(const v1::JobSpec& spec, int64_t size,
                              const std::string& field) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be > 0, got ", size));
  }
  const int64_t limit = spec.dataset().train_limit();
  if (limit > 0 && size > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", size, " is above dataset.train_limit ", limit));
  }
  const int64_t chunk = std::max<int64_t>(1, spec.dataset().chunk_size());
  if ((size - 1) / chunk + 1 > kMaxChunksPerEpoch) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", size, " makes more than ", kMaxChunksPerEpoch,
        " chunks an epoch at dataset.chunk_size ", chunk,
        ": raise dataset.chunk_size to at least ",
        (size - 1) / kMaxChunksPerEpoch + 1));
  }
  return absl::OkStatus();
}

absl::Status ValidateModelSpec(const v1::ModelSpec& model) {
  return ValidateModel(model);
}

absl::Status ValidateJobSpec(const JobSpec& spec) {
  auto got = [](auto v) { return absl::StrCat(", got ", v); };
  if (spec.name().empty()) return Bad("name", "must not be empty");
  if (spec.name().size() > 128)
    return Bad("name", "must be at most 128 characters");
  // Every string a spec carries is bounded (a spec may come as a proto,
  // not only through the parser).
  for (const auto& [field, value] :
       std::initializer_list<std::pair<const char*, const std::string*>>{
           {"model.type", &spec.model().type()},
           {"model.activation", &spec.model().activation()},
           {"model.table", &spec.model().table()},
           {"model.interaction", &spec.model().interaction()},
           {"dataset.format", &spec.dataset().format()},
           {"dataset.dir", &spec.dataset().dir()},
           {"dataset.sharding", &spec.dataset().sharding()},
           {"optimizer.type", &spec.optimizer().type()},
           {"optimizer.schedule.type", &spec.optimizer().schedule().type()},
           {"optimizer.on_nonfinite", &spec.optimizer().on_nonfinite()},
           {"consistency.mode", &spec.consistency().mode()},
           {"checkpoint.dir", &spec.checkpoint().dir()}}) {
    if (value->size() > kMaxStringBytes) {
      return Bad(field, absl::StrCat("must be at most ", kMaxStringBytes,
                                     " bytes, got ", value->size()));
    }
  }
  RETURN_IF_ERROR(ValidateModel(spec.model()));
  const auto& d = spec.dataset();
  const bool external = spec.model().type() == "external";
  const std::string want_format =
      spec.model().type() == "embedding_mlp" ? "criteo" : "idx";
  if (!external && d.format() != want_format) {
    return Bad("dataset.format",
               absl::StrCat("must be ", want_format, " for model.type ",
                            spec.model().type(), ", got ", Quote(d.format())));
  }
  if (!external && d.dir().empty())
    return Bad("dataset.dir", "must not be empty");
  if (d.train_limit() < 0)
    return Bad("dataset.train_limit",
               absl::StrCat("must be >= 0", got(d.train_limit())));
  if (d.test_limit() < 0)
    return Bad("dataset.test_limit",
               absl::StrCat("must be >= 0", got(d.test_limit())));
  if (d.sharding() != "chunks" && d.sharding() != "static") {
    return Bad("dataset.sharding",
               absl::StrCat("must be one of [chunks, static], got ",
                            Quote(d.sharding())));
  }

  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  RETURN_IF_ERROR(ValidateConsistency(spec.consistency()));
  if (spec.optimizer().type() == "average" &&
      !(spec.consistency().mode() == "sync" ||
        (spec.consistency().mode() == "ssp" &&
         spec.consistency().staleness() == 0))) {
    return Bad("optimizer.type",
               "average needs consistency.mode sync (every worker applies "
               "the same averaged gradient)");
  }
  RETURN_IF_ERROR(ValidateCheckpoint(spec));
  if (spec.batch_size() < 1 || spec.batch_size() > 65536) {
    return Bad("batch_size",
               absl::StrCat("must be in [1, 65536]", got(spec.batch_size())));
  }
  if (spec.dataset().chunk_size() < 1) {
    return Bad("dataset.chunk_size",
               absl::StrCat("must be >= 1", got(spec.dataset().chunk_size())));
  }
  if (spec.dataset().size() < 0) {
    return Bad("dataset.size",
               absl::StrCat("must be >= 0", got(spec.dataset().size())));
  }
  if (spec.dataset().size() > 0) {
    RETURN_IF_ERROR(CheckDatasetSize(spec, spec.dataset().size(),
                                     "dataset.size"));
  }
  if (spec.epochs() < 1)
    return Bad("epochs", absl::StrCat("must be >= 1", got(spec.epochs())));
  if (spec.workers().min() < 1)
    return Bad("workers.min",
               absl::StrCat("must be >= 1", got(spec.workers().min())));
  if (spec.workers().max() < spec.workers().min()) {
    return Bad("workers.max",
               absl::StrCat("must be >= workers.min (", spec.workers().min(),
                            ")", got(spec.workers().max())));
  }
  if (spec.workers().max() > 1024)
    return Bad("workers.max",
               absl::StrCat("must be <= 1024", got(spec.workers().max())));
  if (spec.shards() < 1 || spec.shards() > 256)
    return Bad("shards",
               absl::StrCat("must be in [1, 256]", got(spec.shards())));
  if (!(spec.target_accuracy() >= 0 && spec.target_accuracy() <= 1)) {
    return Bad("target_accuracy",
               absl::StrCat("must be in [0, 1]", got(spec.target_accuracy())));
  }
  if (spec.partition_bytes() < 1024 || spec.partition_bytes() % 4 != 0) {
    return Bad("partition_bytes",
               absl::StrCat("must be a multiple of 4 and >= 1024",
                            got(spec.partition_bytes())));
  }
  if (spec.chunk_bytes() < 1024 || spec.chunk_bytes() > kMaxChunkBytes ||
      spec.chunk_bytes() % 4 != 0) {
    return Bad("chunk_bytes",
               absl::StrCat("must be a multiple of 4 in [1024, ",
                            kMaxChunkBytes, "]", got(spec.chunk_bytes())));
  }
  if (spec.eval_every_steps() < 1)
    return Bad("eval_every_steps",
               absl::StrCat("must be >= 1", got(spec.eval_every_steps())));
  if (spec.max_steps() < 0)
    return Bad("max_steps",
               absl::StrCat("must be >= 0", got(spec.max_steps())));
  if (spec.encoding() != v1::ENCODING_UNSPECIFIED) {
    return Bad("encoding",
               absl::StrCat("(the old name of wire.gradients) must be fp32, "
                            "bf16 or fp16 and agree with wire.gradients",
                            got(spec.encoding())));
  }
  if (!EncodingFromProto(spec.wire().gradients(), "wire.gradients").ok()) {
    return Bad("wire.gradients", absl::StrCat("must be fp32, bf16 or fp16",
                                              got(spec.wire().gradients())));
  }
  if (spec.wire().parameters() != v1::ENCODING_FP32 &&
      spec.wire().parameters() != v1::ENCODING_BF16) {
    return Bad("wire.parameters",
               absl::StrCat("must be fp32 or bf16 (fp16 cannot hold every "
                            "weight)", got(spec.wire().parameters())));
  }
  if (!(spec.wire().topk() >= 0.0 && spec.wire().topk() <= 1.0)) {
    return Bad("wire.topk",
               absl::StrCat("must be in (0, 1] (the fraction of each chunk's "
                            "elements sent; 0: dense)",
                            got(spec.wire().topk())));
  }
  if (!(spec.wire().randomk() >= 0.0 && spec.wire().randomk() <= 1.0)) {
    return Bad("wire.randomk",
               absl::StrCat("must be in (0, 1] (the fraction of each chunk's "
                            "elements sent; 0: dense)",
                            got(spec.wire().randomk())));
  }
  if (spec.wire().topk() > 0 && spec.wire().randomk() > 0) {
    return Bad("wire.randomk",
               "cannot be combined with wire.topk (one sparsifier a job)");
  }
  if (spec.wire().sparse_min_bytes() < 0 ||
      spec.wire().sparse_min_bytes() > (int64_t{1} << 30)) {
    return Bad("wire.sparse_min_bytes",
               absl::StrCat("must be in [0, 1073741824]",
                            got(spec.wire().sparse_min_bytes())));
  }
  if (spec.wire().topk_warmup_steps() < 0) {
    return Bad("wire.topk_warmup_steps",
               absl::StrCat("must be >= 0",
                            got(spec.wire().topk_warmup_steps())));
  }
  if (spec.wire().pre_reduce()) {
    if (!(spec.consistency().mode() == "sync" ||
          (spec.consistency().mode() == "ssp" &&
           spec.consistency().staleness() == 0))) {
      return Bad("wire.pre_reduce",
                 "needs consistency.mode sync (a host's pushes are summed "
                 "per step)");
    }
    if (SparseFraction(spec) > 0) {
      return Bad("wire.pre_reduce",
                 absl::StrCat("cannot be combined with wire.",
                              spec.wire().topk() > 0 ? "topk" : "randomk",
                              " (the sum is pushed dense)"));
    }
  }
  RETURN_IF_ERROR(ValidateEmbeddingTables(spec));
  if (spec.model().type() == "embedding_mlp") {
    bool declared = false;
    for (const v1::EmbeddingTableSpec& t : spec.embeddings())
      declared = declared || t.name() == spec.model().table();
    if (!declared) {
      return Bad("model.table",
                 absl::StrCat(Quote(spec.model().table()),
                              " is not one of the job's embeddings"));
    }
    const v1::ModelSpec& m = spec.model();
    if (m.interaction() == "dot") {
      int dim = 0;
      for (const v1::EmbeddingTableSpec& t : spec.embeddings())
        if (t.name() == m.table()) dim = t.dim();
      if (m.bottom_size() == 0 || m.bottom(m.bottom_size() - 1) != dim) {
        return Bad("model.bottom",
                   absl::StrCat("must end at the table's dim (", dim,
                                ") for interaction dot"));
      }
    }
  }
  return absl::OkStatus();
}

bool PreReduce(const v1::JobSpec& spec) {
  // Off unless asked: it won end to end on the reference job but lost the
  // exchange alone from 1 MB up (docs/benchmarks.md).
  return spec.wire().pre_reduce();
}

double SparseFraction(const v1::JobSpec& spec) {
  return spec.wire().topk() > 0 ? spec.wire().topk() : spec.wire().randomk();
}

int64_t SparseMinBytes(const v1::JobSpec& spec) {
  return spec.wire().has_sparse_min_bytes() ? spec.wire().sparse_min_bytes()
                                            : kDefaultSparseMinBytes;
}

bool MomentumOnWorkers(const v1::JobSpec& spec) {
  return SparseFraction(spec) > 0 && spec.optimizer().type() == "momentum" &&
         spec.optimizer().momentum() > 0 &&
         (!spec.wire().has_momentum_correction() ||
          spec.wire().momentum_correction());
}

}  // namespace fulcrum
