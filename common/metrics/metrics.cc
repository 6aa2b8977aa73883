#include "common/metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace fulcrum::metrics {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

void Histogram::Observe(double v) {
  const size_t i =
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::Counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i) b.push_back(start + i * width);
  return b;
}

std::vector<double> LatencyBuckets() {
  return ExponentialBuckets(1e-4, 2.5, 14);
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip
  return std::string(buf, r.ptr);
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

FamilyBase::FamilyBase(std::string name, std::string help, std::string type,
                       std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(std::move(type)),
      label_names_(std::move(label_names)) {}

const void* FamilyBase::Child(
    const std::vector<std::string>& values,
    const std::function<std::shared_ptr<void>()>& make) {
  std::vector<std::string> key = values;
  key.resize(label_names_.size());  // missing values are "", extra ones dropped
  absl::MutexLock lock(&mu_);
  auto it = children_.find(key);
  if (it != children_.end()) return it->second.get();
  if (children_.size() >= kMaxChildren) {
    key.assign(label_names_.size(), "overflow");
    it = children_.find(key);
    if (it != children_.end()) return it->second.get();
  }
  std::shared_ptr<void> child = make();
  const void* raw = child.get();
  children_[key] = std::move(child);
  return raw;
}

void FamilyBase::Clear() {
  absl::MutexLock lock(&mu_);
  children_.clear();
}

void FamilyBase::Render(std::string* out) const {
  absl::MutexLock lock(&mu_);
  if (children_.empty()) return;  // declared, never used: nothing to say yet
  *out += "# HELP " + name_ + " " + EscapeHelp(help_) + "\n";
  *out += "# TYPE " + name_ + " " + type_ + "\n";
  for (const auto& [values, child] : children_) {
    std::string labels;
    for (size_t i = 0; i < values.size(); ++i) {
      labels += (i == 0 ? "" : ",") + label_names_[i] + "=\"" +
                EscapeLabelValue(values[i]) + "\"";
    }
    RenderChild(child.get(), labels, out);
  }
}

template <>
void Family<Counter>::RenderChild(const void* c, const std::string& labels,
                                  std::string* out) const {
  *out += name_ + (labels.empty() ? "" : "{" + labels + "}") + " " +
          FormatValue(static_cast<const Counter*>(c)->Value()) + "\n";
}

template <>
void Family<Gauge>::RenderChild(const void* g, const std::string& labels,
                                std::string* out) const {
  *out += name_ + (labels.empty() ? "" : "{" + labels + "}") + " " +
          FormatValue(static_cast<const Gauge*>(g)->Value()) + "\n";
}

template <>
void Family<Histogram>::RenderChild(const void* hp, const std::string& labels,
                                    std::string* out) const {
  const Histogram& h = *static_cast<const Histogram*>(hp);
  const std::vector<uint64_t> counts = h.Counts();
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const std::string le =
        i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf";
    *out += name_ + "_bucket{" + labels + sep + "le=\"" + le + "\"} " +
            std::to_string(cumulative) + "\n";
  }
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  *out += name_ + "_sum" + braces + " " + FormatValue(h.Sum()) + "\n";
  // _count equals the +Inf bucket (the same snapshot), as the format requires.
  *out += name_ + "_count" + braces + " " + std::to_string(cumulative) + "\n";
}

Family<Counter>& Registry::AddCounter(const std::string& name,
                                      const std::string& help,
                                      std::vector<std::string> labels) {
  auto f = std::make_unique<Family<Counter>>(
      name, help, "counter", std::move(labels), [] { return new Counter; });
  Family<Counter>& ref = *f;
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(f));
  return ref;
}

Family<Gauge>& Registry::AddGauge(const std::string& name,
                                  const std::string& help,
                                  std::vector<std::string> labels) {
  auto f = std::make_unique<Family<Gauge>>(
      name, help, "gauge", std::move(labels), [] { return new Gauge; });
  Family<Gauge>& ref = *f;
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(f));
  return ref;
}

Family<Histogram>& Registry::AddHistogram(const std::string& name,
                                          const std::string& help,
                                          std::vector<std::string> labels,
                                          std::vector<double> bounds) {
  auto f = std::make_unique<Family<Histogram>>(
      name, help, "histogram", std::move(labels),
      [bounds] { return new Histogram(bounds); });
  Family<Histogram>& ref = *f;
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(f));
  return ref;
}

void Registry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Expose() const {
  std::vector<std::function<void()>> collectors;
  {
    absl::MutexLock lock(&mu_);
    collectors = collectors_;
  }
  for (const auto& c : collectors) c();
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_) f->Render(&out);
  return out;
}

}  // namespace fulcrum::metrics
