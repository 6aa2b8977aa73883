// A small Prometheus client: counters, gauges and histograms with labels,
// and the text exposition format 0.0.4. prometheus-cpp is not packaged in
// Debian 12; this covers what Fulcrum needs and is checked with promtool.
//
// Hot-path cost: an update is one atomic operation on a child the caller
// looked up once (Family::WithLabels takes a lock; Increment/Set/Observe do
// not). Families hold at most kMaxChildren label sets; further ones share a
// single child whose label values are all "overflow", so a bug cannot grow
// the series count without bound.
//
// Thread safety: everything is safe to use concurrently.
#ifndef FULCRUM_COMMON_METRICS_METRICS_H_
#define FULCRUM_COMMON_METRICS_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fulcrum::metrics {

class Counter {
 public:
  // REQUIRES: v >= 0 (counters only go up).
  void Increment(double v = 1.0) {
    value_.fetch_add(v, std::memory_order_relaxed);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: strictly increasing upper bounds; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (non-cumulative) counts, the +Inf bucket last.
  std::vector<uint64_t> Counts() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t Count() const { return count_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

// Bucket bounds start, start*factor, ... (count of them).
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Bounds start, start+width, ... (count of them).
std::vector<double> LinearBuckets(double start, double width, int count);

class FamilyBase {
 public:
  static constexpr size_t kMaxChildren = 256;
  FamilyBase(std::string name, std::string help, std::string type,
             std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  void Render(std::string* out) const;
  // Drops every child. Only for families refreshed wholesale by a collector
  // (children handed out earlier must not be used afterwards).
  void Clear();

 protected:
  // Appends this child's sample lines; `labels` is `{a="x",b="y"}` or "".
  virtual void RenderChild(const void* child, const std::string& labels,
                           std::string* out) const = 0;
  const void* Child(const std::vector<std::string>& values,
                    const std::function<std::shared_ptr<void>()>& make);

  const std::string name_, help_, type_;
  const std::vector<std::string> label_names_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::shared_ptr<void>> children_
      ABSL_GUARDED_BY(mu_);
};

template <typename T>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help, std::string type,
         std::vector<std::string> label_names, std::function<T*()> make)
      : FamilyBase(std::move(name), std::move(help), std::move(type),
                   std::move(label_names)),
        make_(std::move(make)) {}
  // The child for these label values (one per label name, in order).
  T& WithLabels(const std::vector<std::string>& values = {}) {
    return *static_cast<T*>(const_cast<void*>(Child(values, [this] {
      return std::shared_ptr<void>(std::shared_ptr<T>(make_()));
    })));
  }

 private:
  void RenderChild(const void* child, const std::string& labels,
                   std::string* out) const override;
  const std::function<T*()> make_;
};

class Registry {
 public:
  // Names must be valid Prometheus metric names; counters end in _total.
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> labels = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> labels = {});
  Family<Histogram>& AddHistogram(const std::string& name,
                                  const std::string& help,
                                  std::vector<std::string> labels,
                                  std::vector<double> bounds);
  // Runs before every exposition (to refresh gauges computed from state).
  void AddCollector(std::function<void()> collect);
  // The text exposition format 0.0.4.
  std::string Expose() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

// Exposition helpers, exposed for tests.
std::string FormatValue(double v);
std::string EscapeLabelValue(const std::string& v);
std::string EscapeHelp(const std::string& v);

// Buckets for durations from 100 µs to ~100 s.
std::vector<double> LatencyBuckets();

}  // namespace fulcrum::metrics

#endif  // FULCRUM_COMMON_METRICS_METRICS_H_
