#include "common/config/embedding_spec.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/config/quote.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

using config::Bad;
using config::Handler;
using config::ReadMap;
using config::Scalar;
using config::Str;

template <typename T>
std::string Got(T v) {
  return absl::StrCat(", got ", v);
}

absl::Status ReadTable(const YAML::Node& n, const std::string& at,
                       v1::EmbeddingTableSpec* t) {
  auto* init = t->mutable_init();
  auto* o = t->mutable_optimizer();
  const std::map<std::string, Handler> init_fields = {
      {"type", Str(init->mutable_type())},
      {"scale",
       Scalar<double>("a number", [init](double v) { init->set_scale(v); })},
  };
  const std::map<std::string, Handler> optimizer_fields = {
      {"type", Str(o->mutable_type())},
      {"lr", Scalar<double>("a number", [o](double v) { o->set_lr(v); })},
      {"eps", Scalar<double>("a number", [o](double v) { o->set_eps(v); })},
      {"beta1", Scalar<double>("a number", [o](double v) { o->set_beta1(v); })},
      {"beta2", Scalar<double>("a number", [o](double v) { o->set_beta2(v); })},
      {"initial_accumulator",
       Scalar<double>("a number",
                      [o](double v) { o->set_initial_accumulator(v); })},
  };
  const std::map<std::string, Handler> fields = {
      {"name", Str(t->mutable_name())},
      {"dim", Scalar<int>("an integer", [t](int v) { t->set_dim(v); })},
      {"init", config::Nested(init_fields)},
      {"optimizer", config::Nested(optimizer_fields)},
      {"capacity",
       Scalar<int64_t>("an integer", [t](int64_t v) { t->set_capacity(v); })},
      {"eviction", Str(t->mutable_eviction())},
      {"min_count",
       Scalar<int>("an integer", [t](int v) { t->set_min_count(v); })},
      {"ttl_seconds", Scalar<int64_t>("an integer", [t](int64_t v) {
         t->set_ttl_seconds(v);
       })},
      {"staleness",
       Scalar<int>("an integer", [t](int v) { t->set_staleness(v); })},
  };
  return ReadMap(n, at, fields);
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return true;
}

absl::Status ValidateInit(const v1::EmbeddingInitSpec& init,
                          const std::string& at) {
  const std::string& type = init.type();
  if (type != "uniform" && type != "normal" && type != "zeros") {
    return Bad(at + ".type",
               absl::StrCat("must be one of [uniform, normal, zeros], got ",
                            Quote(type.substr(0, 64))));
  }
  if (type == "zeros") {
    if (init.has_scale()) return Bad(at + ".scale", "applies to uniform and normal only");
    return absl::OkStatus();
  }
  if (!(init.scale() > 0) || !std::isfinite(init.scale())) {
    return Bad(at + ".scale", absl::StrCat("must be > 0", Got(init.scale())));
  }
  return absl::OkStatus();
}

absl::Status ValidateRowOptimizer(const v1::EmbeddingOptimizerSpec& o,
                                  const std::string& at) {
  const std::string& type = o.type();
  if (type != "adagrad" && type != "adam" && type != "sgd") {
    return Bad(at + ".type",
               absl::StrCat("must be one of [adagrad, adam, sgd], got ",
                            Quote(type.substr(0, 64))));
  }
  if (!(o.lr() > 0) || !std::isfinite(o.lr())) {
    return Bad(at + ".lr", absl::StrCat("must be > 0", Got(o.lr())));
  }
  if (type == "sgd" && o.has_eps()) {
    return Bad(at + ".eps", "applies to adagrad and adam only");
  }
  if (o.has_eps() && !(o.eps() > 0 && std::isfinite(o.eps()))) {
    return Bad(at + ".eps", absl::StrCat("must be > 0", Got(o.eps())));
  }
  if (type != "adam" && (o.has_beta1() || o.has_beta2())) {
    return Bad(at + ".beta1", "beta1/beta2 apply to adam only");
  }
  if (o.has_beta1() && !(o.beta1() >= 0 && o.beta1() < 1)) {
    return Bad(at + ".beta1", absl::StrCat("must be in [0, 1)", Got(o.beta1())));
  }
  if (o.has_beta2() && !(o.beta2() >= 0 && o.beta2() < 1)) {
    return Bad(at + ".beta2", absl::StrCat("must be in [0, 1)", Got(o.beta2())));
  }
  if (o.initial_accumulator() != 0 && type != "adagrad") {
    return Bad(at + ".initial_accumulator", "applies to adagrad only");
  }
  if (!(o.initial_accumulator() >= 0) ||
      !std::isfinite(o.initial_accumulator())) {
    return Bad(at + ".initial_accumulator",
               absl::StrCat("must be >= 0", Got(o.initial_accumulator())));
  }
  return absl::OkStatus();
}

}  // namespace

config::Handler EmbeddingTablesField(v1::JobSpec* spec) {
  return [spec](const YAML::Node& n, const std::string& f) -> absl::Status {
    if (!n.IsSequence()) return Bad(f, "must be a list of tables");
    for (size_t i = 0; i < n.size(); ++i) {
      RETURN_IF_ERROR(ReadTable(n[i], absl::StrCat(f, "[", i, "]"),
                                spec->add_embeddings()));
    }
    return absl::OkStatus();
  };
}

void ApplyEmbeddingDefaults(v1::JobSpec* spec) {
  for (v1::EmbeddingTableSpec& t : *spec->mutable_embeddings()) {
    auto* init = t.mutable_init();
    if (init->type().empty()) init->set_type("uniform");
    if (init->type() != "zeros" && !init->has_scale())
      init->set_scale(kDefaultEmbeddingInitScale);
    auto* o = t.mutable_optimizer();
    if (o->type().empty()) o->set_type("adagrad");
    if (!o->has_eps()) {
      if (o->type() == "adagrad") o->set_eps(1e-10);
      if (o->type() == "adam") o->set_eps(1e-8);
    }
    if (o->type() == "adam") {
      if (!o->has_beta1()) o->set_beta1(0.9);
      if (!o->has_beta2()) o->set_beta2(0.999);
    }
    if (t.eviction().empty()) t.set_eviction("lru");
    if (!t.has_min_count()) t.set_min_count(1);
  }
}

absl::Status ValidateEmbeddingTables(const v1::JobSpec& spec) {
  if (spec.embeddings_size() > kMaxEmbeddingTables) {
    return Bad("embeddings",
               absl::StrCat("must have at most ", kMaxEmbeddingTables,
                            " tables", Got(spec.embeddings_size())));
  }
  std::set<std::string> names;
  for (int i = 0; i < spec.embeddings_size(); ++i) {
    const v1::EmbeddingTableSpec& t = spec.embeddings(i);
    const std::string at = absl::StrCat("embeddings[", i, "]");
    if (!ValidName(t.name())) {
      return Bad(at + ".name",
                 absl::StrCat("must be 1 to 64 of [a-z0-9_], got ",
                              Quote(t.name().substr(0, 64))));
    }
    if (!names.insert(t.name()).second) {
      return Bad(at + ".name", absl::StrCat(Quote(t.name()), " is declared twice"));
    }
    if (t.dim() < 1 || t.dim() > kMaxEmbeddingDim) {
      return Bad(at + ".dim", absl::StrCat("must be in [1, ", kMaxEmbeddingDim,
                                           "]", Got(t.dim())));
    }
    RETURN_IF_ERROR(ValidateInit(t.init(), at + ".init"));
    RETURN_IF_ERROR(ValidateRowOptimizer(t.optimizer(), at + ".optimizer"));
    if (t.capacity() < 1) {
      return Bad(at + ".capacity",
                 absl::StrCat("must be >= 1 (rows the table may hold)",
                              Got(t.capacity())));
    }
    if (RowsPerShard(t, std::max(spec.shards(), 1)) > kMaxRowsPerShard) {
      return Bad(at + ".capacity",
                 absl::StrCat("must be at most ", kMaxRowsPerShard,
                              " rows per shard (capacity / shards)",
                              Got(t.capacity())));
    }
    if (t.eviction() != "lru" && t.eviction() != "lfu") {
      return Bad(at + ".eviction",
                 absl::StrCat("must be one of [lru, lfu], got ",
                              Quote(t.eviction().substr(0, 64))));
    }
    if (t.min_count() < 1 || t.min_count() > kMaxMinCount) {
      return Bad(at + ".min_count", absl::StrCat("must be in [1, ", kMaxMinCount,
                                                 "]", Got(t.min_count())));
    }
    constexpr int64_t kTenYears = int64_t{10} * 366 * 24 * 3600;
    if (t.ttl_seconds() < 0 || t.ttl_seconds() > kTenYears) {
      return Bad(at + ".ttl_seconds",
                 absl::StrCat("must be in [0, ", kTenYears, "] (0: never)",
                              Got(t.ttl_seconds())));
    }
    if (t.has_staleness() && (t.staleness() < 0 || t.staleness() > 1000)) {
      return Bad(at + ".staleness",
                 absl::StrCat("must be in [0, 1000] (leave it out for no "
                              "bound)", Got(t.staleness())));
    }
  }
  return absl::OkStatus();
}

int64_t RowsPerShard(const v1::EmbeddingTableSpec& table, int shards) {
  if (shards < 1) shards = 1;
  return (table.capacity() + shards - 1) / shards;
}

int64_t BytesPerRow(const v1::EmbeddingTableSpec& table) {
  const std::string& type = table.optimizer().type();
  const int64_t dim = table.dim();
  const int64_t state = type == "adam" ? 2 * dim + 1 : type == "sgd" ? 0 : dim;
  return 4 * (dim + state) + 24 + 21 + (table.min_count() > 1 ? 8 : 0);
}

int64_t EmbeddingShardBytes(const v1::JobSpec& spec) {
  int64_t bytes = 0;
  for (const v1::EmbeddingTableSpec& t : spec.embeddings()) {
    bytes += RowsPerShard(t, std::max(spec.shards(), 1)) * BytesPerRow(t);
  }
  return bytes;
}

}  // namespace fulcrum
