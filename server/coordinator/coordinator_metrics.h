// The coordinator's Prometheus metrics (docs/metrics.md): job and membership
// gauges refreshed from the core at every scrape, and counters fed by the
// core's hooks.
#ifndef FULCRUM_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
#define FULCRUM_SERVER_COORDINATOR_COORDINATOR_METRICS_H_

#include <string>

#include "common/metrics/metrics.h"
#include "server/coordinator/coordinator_core.h"

namespace fulcrum {

class CoordinatorMetrics {
 public:
  // Registers the families and a collector reading `core` (not owned; must
  // outlive the registry's use). Jobs are exported while running and for
  // the kRecentEnded most recently ended ones.
  CoordinatorMetrics(metrics::Registry& registry, const Coordinator* core);
  static constexpr int kRecentEnded = 16;

  // For Coordinator::Options::on_member_lost.
  void MemberLost(const std::string& role);
  // For CoordinatorService: a user-facing call refused for its API token.
  void Unauthenticated();

 private:
  void Collect();

  const Coordinator* const core_;  // Not owned.
  metrics::Family<metrics::Gauge>& jobs_;
  metrics::Family<metrics::Gauge>& members_;
  metrics::Family<metrics::Counter>& members_lost_;
  metrics::Family<metrics::Counter>& unauthenticated_;
  metrics::Family<metrics::Gauge>& live_workers_;
  metrics::Family<metrics::Gauge>& generation_;
  metrics::Family<metrics::Gauge>& running_;
  metrics::Family<metrics::Gauge>& step_;
  metrics::Family<metrics::Gauge>& loss_;
  metrics::Family<metrics::Gauge>& accuracy_;
  metrics::Family<metrics::Gauge>& samples_per_second_;
  metrics::Family<metrics::Gauge>& staleness_max_;
  metrics::Family<metrics::Gauge>& checkpoint_step_;
  metrics::Family<metrics::Gauge>& checkpoint_every_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
