#!/usr/bin/env bash
# One straggler among 4 workers: the reference MLP on Fashion-MNIST in sync,
# ssp(3) and async, with the last worker slowed 3x (--slowdown=3). Prints one
# table: wall time to 0.85 test accuracy, final accuracy, samples/s and the
# staleness of the reads.
#
#   bench/stragglers.sh [--runs R] [--slowdown X] [--target ACC]
#                       [--modes "sync ssp async"] [--momentum M] [--lr LR]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/cluster.sh
runs=1 slowdown=3 target=0.85 workers=4 shards=2 modes="sync ssp async"
momentum=0.9 lr=0.05
source tools/lib/flags.sh
flags_parse runs slowdown target modes momentum lr -- "$@"
cluster_build
run=.fulcrum/stragglers
cluster_start "$run" "$shards"
# Registration order gives ranks: the straggler registers last (rank 3), so
# rank 0, which evaluates, runs at full speed in every mode.
for i in $(seq $((workers - 1))); do
  cluster_add_worker "$run" "worker-$i"
  cluster_wait_members $((shards + i))
done
cluster_add_worker "$run" "worker-slow" --slowdown="$slowdown"
cluster_wait_members $((shards + workers))

job() {  # mode staleness
  cat > "$run/job.yaml" <<YAML
name: stragglers-$1
model: {type: mlp, layers: [784, 256, 128, 10]}
dataset: {format: idx, dir: /usr/share/datasets/fashion-mnist}
optimizer: {type: momentum, lr: $lr, momentum: $momentum}
consistency: {mode: $1, staleness: $2}
batch_size: 64
epochs: 10
workers: {min: $workers, max: $workers}
shards: $shards
seed: 1
target_accuracy: $target
eval_every_steps: 25
YAML
  local id
  id=$(ctl submit "$run/job.yaml")
  ctl status "$id" --watch >/dev/null || true
  ctl status "$id" --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
t = j["end_time_unix"] - j["start_time_unix"]
p, s = j["progress"], j.get("staleness", {})
print("%-8s %12.1f %10.4f %10.0f %8.2f %5s %8s" % (sys.argv[1], t, p.get("test_accuracy", 0),
      int(p.get("samples_total", 0)) / t, s.get("mean", 0), s.get("max", "0"), j["state"]))
' "$3"
}

echo "4 workers (one ${slowdown}x slower), 2 shards, batch 64/worker, momentum $momentum lr $lr, stop at test accuracy $target"
printf "%-8s %12s %10s %10s %8s %5s %8s\n" mode "time to acc" "final acc" "samples/s" "stale" "max" state
for r in $(seq "$runs"); do
  for m in $modes; do
    case $m in
      sync) job sync 0 sync ;;
      ssp) job ssp 3 "ssp(3)" ;;
      async) job async 0 async ;;
    esac
  done
done
