// A TCP proxy on 127.0.0.1 that drops connections at random: for tests of
// what a lost reply or a broken stream does to training. Each chunk of
// bytes it forwards, in either direction, ends the connection (both sides)
// with probability `drop_probability` instead of being forwarded, so
// requests and replies are lost at arbitrary points.
#ifndef FULCRUM_COMMON_TESTING_FAULT_PROXY_H_
#define FULCRUM_COMMON_TESTING_FAULT_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace fulcrum::testing {

class FaultProxy {
 public:
  FaultProxy(int target_port, double drop_probability, uint64_t seed);
  ~FaultProxy();  // closes every connection and joins its threads
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }
  int64_t connections() const { return connections_.load(); }
  int64_t drops() const { return drops_.load(); }
  // Stops dropping (to let a test finish cleanly).
  void Calm() { calm_ = true; }
  // Ends every connection open now (both sides), whatever the probability;
  // counted in drops(). New connections are forwarded as before.
  void DropAll();

 private:
  struct Link;
  void AcceptLoop();
  void Pump(std::shared_ptr<Link> link, bool upstream);
  bool Drop();

  const int target_port_;
  const double drop_probability_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> calm_{false};
  std::atomic<int64_t> connections_{0};
  std::atomic<int64_t> drops_{0};
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);  // for DropAll
  std::thread acceptor_;
};

}  // namespace fulcrum::testing

#endif  // FULCRUM_COMMON_TESTING_FAULT_PROXY_H_
