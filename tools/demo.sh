#!/usr/bin/env bash
# Builds Fulcrum, starts a local cluster (1 coordinator, S shards, W workers,
# all separate processes on 127.0.0.1), trains Fashion-MNIST with live
# progress and stops everything it started (also on Ctrl-C).
#
#   tools/demo.sh [--workers N] [--shards S] [--job FILE]
#   tools/demo.sh --torch [--workers N] [--shards S] [--job FILE]
#
# --torch trains the CNN of examples/torch with PyTorch workers
# (examples/torch/fulcrum_train.py, Debian's python3-torch) instead of
# fulcrum-worker processes: 8 epochs, about 6 minutes on 2 cores, to the
# dataset README's 2-conv figure (0.916).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/cluster.sh

workers=2
shards=2
job=""
torch=0
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --job) job=$2; shift 2 ;;
    --torch) torch=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "demo: unknown argument $1" >&2; exit 2 ;;
  esac
done

echo "demo: building (the first build takes a few minutes)..."
cluster_build
[ $torch -eq 0 ] || cluster_build_torch
run=.fulcrum/demo
trap 'echo; echo "demo: interrupted, stopping the cluster"; exit 130' INT TERM
cluster_start "$run" "$shards"
kind=$([ $torch -eq 1 ] && echo "PyTorch worker(s)" || echo "worker(s)")
echo "demo: coordinator on $coord; starting $shards shard(s) and $workers $kind; logs in $run/"
if [ $torch -eq 0 ]; then
  job=${job:-examples/fashion_mnist_mlp.yaml}
  for i in $(seq "$workers"); do cluster_add_worker "$run" "worker-$i"; done
  # Wait until every process has registered, so the job starts with all workers.
  cluster_wait_members $((workers + shards))
  job_id=$(ctl submit "$job")
else
  job=${job:-examples/torch/fashion_mnist_cnn.yaml}
  cluster_wait_members "$shards"
  job_id=$(ctl submit "$job")
  # PyTorch workers register for one job: they start once it exists.
  threads=$(( $(nproc) / workers > 0 ? $(nproc) / workers : 1 ))
  for i in $(seq "$workers"); do
    cluster_add_torch_worker "$run" "worker-$i" examples/torch/fulcrum_train.py \
      --job "$job_id" --threads "$threads"
  done
fi
echo "demo: submitted $job as $job_id"
set +e
ctl status "$job_id" --watch
rc=$?
set -e
exit $rc
