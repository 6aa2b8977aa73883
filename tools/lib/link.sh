# A network link of a given rate on this host, for benchmarks that need a
# link slower than memory (bench/exchange.sh --link): a network namespace
# ("the worker host") joined to this one ("the shard host") by a veth pair,
# each end shaped to RATE by a token bucket (tc tbf), so that everything the
# workers send and receive shares one link of RATE each way, as a host's NIC
# would. Needs root (CAP_NET_ADMIN) and iproute2. Source it, then:
#   link_up RATE        # e.g. 1gbit, 10gbit; sets link_host and link_exec
#   "${link_exec[@]}" CMD ...   # runs CMD on the worker side
#   link_down           # removes the namespace and the pair (idempotent)
#   link_cluster RATE   # link_up, and tools/lib/cluster.sh on its two sides:
#                       # coordinator and shards on $link_host (--insecure),
#                       # workers through cluster_worker_prefix
#   link_guard          # after cluster_start: stop the cluster and take
#                       # the link down at exit
# The shard side listens on $link_host (10.211.0.1); processes there that
# serve plaintext need --insecure (the address is not loopback).
link_ns=fulcrum-link
link_host=10.211.0.1
link_peer=10.211.0.2
link_exec=(ip netns exec "$link_ns")

link_down() {
  ip netns del "$link_ns" 2>/dev/null || true  # takes its end of the pair
  ip link del fulcrum-l0 2>/dev/null || true
}

link_up() {
  local rate=$1
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "--link needs iproute2 (ip, tc)" >&2
    return 1
  fi
  link_down
  if ! ip netns add "$link_ns" 2>/dev/null; then
    echo "--link needs root (CAP_NET_ADMIN) to make a network namespace" >&2
    return 1
  fi
  ip link add fulcrum-l0 type veth peer name fulcrum-l1
  ip link set fulcrum-l1 netns "$link_ns"
  ip addr add "$link_host/24" dev fulcrum-l0
  ip link set fulcrum-l0 up
  "${link_exec[@]}" ip addr add "$link_peer/24" dev fulcrum-l1
  "${link_exec[@]}" ip link set fulcrum-l1 up
  "${link_exec[@]}" ip link set lo up
  # Each direction shaped where it leaves: the shard host's egress
  # (parameters) and the worker host's (gradients).
  tc qdisc add dev fulcrum-l0 root tbf rate "$rate" burst 1mb latency 100ms
  "${link_exec[@]}" tc qdisc add dev fulcrum-l1 root tbf rate "$rate" \
    burst 1mb latency 100ms
}

link_cluster() {
  link_up "$1" || return 1
  trap link_down EXIT
  cluster_host=$link_host
  cluster_coordinator_flags+=(--insecure)
  cluster_shard_flags+=(--insecure)
  cluster_worker_prefix=("${link_exec[@]}")
}

link_guard() {
  trap 'cluster_stop; link_down' EXIT
}
