#!/usr/bin/env bash
# Builds Fulcrum, starts a local cluster (1 coordinator, S shards, W workers,
# all separate processes on 127.0.0.1), trains Fashion-MNIST with live
# progress and stops everything it started (also on Ctrl-C).
#
#   tools/demo.sh [--workers N] [--shards S] [--job FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/cluster.sh

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

echo "demo: building (the first build takes a few minutes)..."
cluster_build
run=.fulcrum/demo
trap 'echo; echo "demo: interrupted, stopping the cluster"; exit 130' INT TERM
cluster_start "$run" "$shards"
echo "demo: coordinator on $coord; starting $shards shard(s) and $workers worker(s); logs in $run/"
for i in $(seq "$workers"); do cluster_add_worker "$run" "worker-$i"; done
# Wait until every process has registered, so the job starts with all workers.
cluster_wait_members $((workers + shards))
job_id=$(ctl submit "$job")
echo "demo: submitted $job as $job_id"
set +e
ctl status "$job_id" --watch
rc=$?
set -e
exit $rc
