#!/usr/bin/env bash
# Runs Fulcrum from its container image, one container per process as a user
# deploys it: a coordinator (state on a volume), 2 parameter servers
# (checkpoints on a volume), 2 workers, all on mutual TLS (certificates from
# tools/make_certs.sh) with an API token for fulcrumctl. fulcrumctl (from the image) submits
# the reference job the image carries; midway one worker container is stopped
# (SIGTERM: a graceful leave) and a third one started (an elastic join). It
# checks that the job succeeds at its target, that every container answers
# /readyz and serves /metrics, that checkpoints reached the servers' volumes,
# prints a summary and removes what it started. Containers run as the image's
# non-root user with a read-only root file system, as deploy/k8s runs them.
#
#   tools/container_check.sh [--image IMAGE]   (default: tools/build_image.sh builds one)
#
# Containers use the host network on 127.0.0.1 with free ports, so that it
# runs without a CNI setup; deploy/k8s is the multi-host layout.
set -euo pipefail
cd "$(dirname "$0")/.."
image=""
while [ $# -gt 0 ]; do
  case "$1" in
    --image) image=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "container_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$image" ]; then
  bash tools/build_image.sh --tag check
  image=localhost/fulcrum:check
fi
work=$(mktemp -d)
prefix=fulcrum-check-$$
# Some hosts cannot run podman's default runtime (crun: rlimits, hybrid
# cgroups); runc with explicit ulimits works there.
if ! podman run --rm --network host "$image" true >/dev/null 2>&1; then
  cat > "$work/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  export CONTAINERS_CONF=$work/containers.conf
  podman run --rm --network host "$image" true >/dev/null ||
    { echo "container_check: cannot run containers here" >&2; exit 1; }
fi

cleanup() {
  podman ps -a --format '{{.Names}}' | grep "^$prefix-" | xargs -r podman rm -f -t 2 >/dev/null 2>&1 || true
  podman volume ls --format '{{.Name}}' | grep "^$prefix-" | xargs -r podman volume rm -f >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# Key material, readable by the image's user (a throwaway CA for this run).
bash tools/make_certs.sh "$work/tls" --days 1 >/dev/null
head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$work/tls/token"
chmod 644 "$work/tls"/*
tls=(-v "$work/tls:/etc/fulcrum/tls:ro")
tls_flags=(--tls_cert=/etc/fulcrum/tls/tls.crt --tls_key=/etc/fulcrum/tls/tls.key
           --tls_ca=/etc/fulcrum/tls/ca.crt)
ctl_flags=("${tls_flags[@]}" --token_file=/etc/fulcrum/tls/token)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
run() {  # NAME ARGS... : a detached container on the host network, with a
          # read-only root file system as in deploy/k8s
  local name=$1; shift
  podman run -d --read-only --name "$prefix-$name" --network host "${tls[@]}" "$@" >/dev/null
}
coord_port=$(free_port)
coord=127.0.0.1:$coord_port
declare -A metrics
metrics[coordinator]=$(free_port)
run coordinator -v "$prefix-state:/var/lib/fulcrum/state" "$image" \
  fulcrum-coordinator --listen="$coord" --heartbeat_ms=200 \
  --state_dir=/var/lib/fulcrum/state --token_file=/etc/fulcrum/tls/token \
  --metrics_address=127.0.0.1 --metrics_port="${metrics[coordinator]}" "${tls_flags[@]}"
for i in 1 2; do
  port=$(free_port); metrics[server-$i]=$(free_port)
  run "server-$i" -v "$prefix-ckpt-$i:/var/lib/fulcrum/checkpoints" "$image" \
    fulcrum-server --listen="127.0.0.1:$port" --coordinator="$coord" \
    --metrics_address=127.0.0.1 --metrics_port="${metrics[server-$i]}" "${tls_flags[@]}"
done
add_worker() {
  metrics[$1]=$(free_port)
  run "$1" "$image" fulcrum-worker --coordinator="$coord" --device=cpu \
    --metrics_address=127.0.0.1 --metrics_port="${metrics[$1]}" "${tls_flags[@]}"
}
add_worker worker-1
add_worker worker-2
ctl() {
  podman run --rm --network host "${tls[@]}" "$image" fulcrumctl \
    --coordinator="$coord" "${ctl_flags[@]}" "$@"
}
for _ in $(seq 150); do
  n=$(ctl members 2>/dev/null | tail -n +2 | wc -l || true)
  [ "$n" -ge 4 ] && break
  sleep 0.2
done
[ "$n" -ge 4 ] || { echo "container_check: only $n of 4 members registered"; podman logs "$prefix-coordinator" | tail; exit 1; }

# The reference job as the image carries it, with checkpoints on the volumes.
job_id=$(podman run --rm --network host "${tls[@]}" "$image" sh -c \
  "sed 's/^seed: .*/seed: 1\ncheckpoint: {every_steps: 500, keep: 2, dir: \/var\/lib\/fulcrum\/checkpoints}/' \
   /etc/fulcrum/jobs/fashion_mnist_mlp.yaml > /tmp/job.yaml &&
   fulcrumctl --coordinator=$coord ${ctl_flags[*]} submit /tmp/job.yaml")
echo "container_check: submitted $job_id"
start=$(date +%s)
# field PATH... of the job's status JSON (a.b.c; lists as counts with #)
field() {
  ctl status "$job_id" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
for path in sys.argv[1:]:
    v = j
    for k in path.split("."):
        v = v.get(k, "") if isinstance(v, dict) else ""
    print(v)' "$@"
}
# Elastic: once it trains, worker-1 leaves and worker-3 joins.
for _ in $(seq 300); do [ "$(field progress.step)" -ge 600 ] 2>/dev/null && break; sleep 0.2; done
podman stop -t 10 "$prefix-worker-1" >/dev/null
add_worker worker-3
state=""
for _ in $(seq 600); do
  state=$(field state)
  case $state in SUCCEEDED|FAILED|CANCELLED) break ;; esac
  sleep 0.5
done
secs=$(( $(date +%s) - start ))
ctl status "$job_id" | tee "$work/status.txt"
json=$(ctl status "$job_id" --json)
kinds=$(echo "$json" | python3 -c '
import json, sys
print(" ".join(e["kind"] for e in json.load(sys.stdin).get("events", [])))')

ok=1
row() { printf "%-40s %s\n" "$1" "$2"; }
echo
echo "== container check: $image =="
row "job state" "$state (${secs} s from submit)"
[ "$state" = SUCCEEDED ] || ok=0
acc=$(field progress.test_accuracy)
row "test accuracy (target 0.89)" "$acc"
python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= 0.89 else 1)" || ok=0
row "membership events" "$kinds"
case " $kinds " in *" left "*) ;; *) ok=0 ;; esac
[ "$(echo "$kinds" | grep -o joined | wc -l)" -ge 5 ] || ok=0  # 2 servers + 3 workers
for name in "${!metrics[@]}"; do
  [ "$name" = worker-1 ] && continue  # stopped on purpose
  port=${metrics[$name]}
  ready=$(python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$port/readyz', timeout=5).status)" 2>/dev/null || echo down)
  lines=$(python3 -c "import urllib.request as u; print(sum(1 for l in u.urlopen('http://127.0.0.1:$port/metrics', timeout=5).read().decode().splitlines() if l.startswith('fulcrum_')))" 2>/dev/null || echo 0)
  row "$name /readyz, fulcrum_* series" "$ready, $lines"
  [ "$ready" = 200 ] && [ "$lines" -gt 0 ] || ok=0
done
# Without the token, or without a client certificate, the coordinator refuses.
if podman run --rm --network host "${tls[@]}" "$image" fulcrumctl --coordinator="$coord" \
     "${tls_flags[@]}" list >/dev/null 2>&1; then
  row "fulcrumctl without the token" "ACCEPTED"; ok=0
else row "fulcrumctl without the token" "refused"; fi
if podman run --rm --network host "${tls[@]}" "$image" fulcrumctl --coordinator="$coord" \
     --tls_ca=/etc/fulcrum/tls/ca.crt --token_file=/etc/fulcrum/tls/token --timeout_ms=3000 \
     list >/dev/null 2>&1; then
  row "fulcrumctl without a client certificate" "ACCEPTED"; ok=0
else row "fulcrumctl without a client certificate" "refused"; fi
transport=$(podman logs "$prefix-coordinator" 2>&1 | grep -o 'mutual TLS; API token required' | head -1)
row "coordinator transport" "${transport:-not mutual TLS}"
[ -n "$transport" ] || ok=0
ckpts=$(podman run --rm -v "$prefix-ckpt-1:/c" "$image" sh -c 'ls /c/*/ 2>/dev/null | grep -c step- || true')
row "checkpoint steps on server-1's volume" "$ckpts"
[ "$ckpts" -gt 0 ] || ok=0
if [ $ok = 1 ]; then echo "container_check: PASS"; else
  echo "container_check: FAIL"
  for c in coordinator server-1 worker-2; do echo "--- $c"; podman logs "$prefix-$c" 2>&1 | tail -5; done
  exit 1
fi
