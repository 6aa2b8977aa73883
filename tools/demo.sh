#!/usr/bin/env bash
# Builds Fulcrum, starts a local cluster (1 coordinator, S shards, W workers,
# all separate processes on 127.0.0.1), trains Fashion-MNIST with live
# progress and stops everything it started (also on Ctrl-C).
#
#   tools/demo.sh [--workers N] [--shards S] [--job FILE]
set -euo pipefail
cd "$(dirname "$0")/.."

workers=2
shards=2
job=examples/fashion_mnist_mlp.yaml
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --job) job=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "demo: unknown argument $1" >&2; exit 2 ;;
  esac
done

bash tools/setup.sh
echo "demo: building (the first build takes a few minutes)..."
bazel build --noshow_progress \
  //server/coordinator:fulcrum-coordinator //server/ps:fulcrum-server \
  //worker:fulcrum-worker //client:fulcrumctl
bin=$(bazel info bazel-bin 2>/dev/null)
bazel shutdown

run=.fulcrum/demo
rm -rf "$run"; mkdir -p "$run"
pids=()
cleanup() {
  trap - EXIT INT TERM
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 50); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  [ ${#pids[@]} -gt 0 ] && kill -9 "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted, stopping the cluster"; exit 130' INT TERM

"$bin/server/coordinator/fulcrum-coordinator" --listen=127.0.0.1:0 \
  --port_file="$run/coordinator.port" --heartbeat_ms=500 2>"$run/coordinator.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$run/coordinator.port" ] && break; sleep 0.1; done
[ -s "$run/coordinator.port" ] || { echo "demo: coordinator did not start (see $run/coordinator.log)" >&2; exit 1; }
coord=127.0.0.1:$(cat "$run/coordinator.port")
echo "demo: coordinator on $coord; starting $shards shard(s) and $workers worker(s); logs in $run/"
for i in $(seq "$shards"); do
  "$bin/server/ps/fulcrum-server" --listen=127.0.0.1:0 --coordinator="$coord" 2>"$run/shard-$i.log" &
  pids+=($!)
done
for i in $(seq "$workers"); do
  "$bin/worker/fulcrum-worker" --coordinator="$coord" 2>"$run/worker-$i.log" &
  pids+=($!)
done
ctl="$bin/client/fulcrumctl"
# Wait until every process has registered, so the job starts with all workers.
for _ in $(seq 100); do
  n=$("$ctl" --coordinator="$coord" members 2>/dev/null | tail -n +2 | wc -l || true)
  [ "$n" -ge $((workers + shards)) ] && break
  sleep 0.1
done
job_id=$("$ctl" --coordinator="$coord" submit "$job")
echo "demo: submitted $job as $job_id"
set +e
"$ctl" --coordinator="$coord" status "$job_id" --watch
rc=$?
set -e
exit $rc
