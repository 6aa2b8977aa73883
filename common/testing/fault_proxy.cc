#include "common/testing/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace fulcrum::testing {

struct FaultProxy::Link {
  int client = -1, server = -1;
  std::atomic<bool> closed{false};
  void Close() {
    if (closed.exchange(true)) return;
    shutdown(client, SHUT_RDWR);
    shutdown(server, SHUT_RDWR);
  }
  ~Link() {
    if (client >= 0) close(client);
    if (server >= 0) close(server);
  }
};

FaultProxy::FaultProxy(int target_port, double drop_probability, uint64_t seed)
    : target_port_(target_port), drop_probability_(drop_probability) {
  {
    absl::MutexLock lock(&mu_);
    rng_.seed(seed);
  }
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    return;
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FaultProxy::~FaultProxy() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

bool FaultProxy::Drop() {
  if (calm_) return false;
  absl::MutexLock lock(&mu_);
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) <
         drop_probability_;
}

void FaultProxy::DropAll() {
  absl::MutexLock lock(&mu_);
  for (const std::weak_ptr<Link>& weak : links_) {
    std::shared_ptr<Link> link = weak.lock();
    if (link == nullptr || link->closed) continue;
    link->Close();
    ++drops_;
  }
  links_.clear();
}

void FaultProxy::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
        0) {
      close(client);
      close(server);
      continue;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto link = std::make_shared<Link>();
    link->client = client;
    link->server = server;
    ++connections_;
    absl::MutexLock lock(&mu_);
    std::erase_if(links_, [](const std::weak_ptr<Link>& l) { return l.expired(); });
    links_.push_back(link);
    threads_.emplace_back([this, link] { Pump(link, true); });
    threads_.emplace_back([this, link] { Pump(link, false); });
  }
}

void FaultProxy::Pump(std::shared_ptr<Link> link, bool upstream) {
  const int from = upstream ? link->client : link->server;
  const int to = upstream ? link->server : link->client;
  char buffer[16384];
  while (!stop_ && !link->closed) {
    pollfd p{from, POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(from, buffer, sizeof(buffer));
    if (n <= 0) break;
    if (Drop()) {
      ++drops_;
      break;
    }
    ssize_t sent = 0;
    while (sent < n) {
      const ssize_t w = send(to, buffer + sent, n - sent, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      sent += w;
    }
    if (sent < n) break;
  }
  link->Close();
}

}  // namespace fulcrum::testing
