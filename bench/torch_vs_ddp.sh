#!/usr/bin/env bash
# PyTorch workers on Fulcrum vs the same script under DDP, same machine, same
# run, alternating R times:
#
#  1. The CNN of examples/torch (2 workers, batch 64 each, momentum SGD with
#     the cosine schedule of examples/torch/fashion_mnist_cnn.yaml, rank 0
#     evaluating the whole test set every 235 steps): Fulcrum (2 PyTorch
#     workers, 2 shards, examples/torch/fulcrum_train.py) vs DDP gloo
#     (bench/ddp_cnn_peer.py), until 0.90 test accuracy. Prints samples/s
#     (training time: the loop's time less evaluation) and time to 0.90.
#  2. The reference MLP 784-256-128-10 on Fulcrum (W workers, 2 shards,
#     batch 64): PyTorch workers (fulcrum_train.py --model mlp, the
#     built-in spec) vs fulcrum-worker, samples/s.
#
#   bench/torch_vs_ddp.sh [--runs R] [--threads T] [--mlp_steps N] [--skip_cnn] [--skip_mlp]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=2 threads=1 mlp_steps=1500 cnn=1 mlp=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --mlp_steps) mlp_steps=$2; shift 2 ;;
    --skip_cnn) cnn=0; shift ;;
    --skip_mlp) mlp=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

source tools/lib/cluster.sh
cluster_build
cluster_build_torch
run=.fulcrum/bench-torch
cluster_start "$run" 2
cluster_wait_members 2
py() { /usr/bin/python3 -c "$1"; }

# The rank-0 summary of the workers' logs: "steps elapsed_s eval_s".
summary() {
  grep -h '^summary rank 0 ' "$@" | awk '{print $5, $7, $9}' | head -1
}

# Runs one Fulcrum job of spec $1 with $2 PyTorch workers (extra args
# after); waits for it; leaves the workers' logs in $run/t-*.log.
fulcrum_torch_job() {
  local spec=$1 n=$2 id i
  shift 2
  rm -f "$run"/t-*.log
  id=$(ctl submit "$spec")
  for i in $(seq "$n"); do
    cluster_add_torch_worker "$run" "t-$i" examples/torch/fulcrum_train.py \
      --job "$id" --threads "$threads" "$@"
  done
  ctl status "$id" --watch >/dev/null
  for _ in $(seq 600); do  # the workers print their summary and exit
    [ "$(grep -l '^summary' "$run"/t-*.log 2>/dev/null | wc -l)" -ge "$n" ] && break
    sleep 0.2
  done
}

if [ "$cnn" = 1 ]; then
  sed -e 's/^target_accuracy:.*/target_accuracy: 0.90/' \
    -e 's/^workers:.*/workers: {min: 2, max: 2}/' \
    examples/torch/fashion_mnist_cnn.yaml >"$run/cnn.yaml"
  echo "CNN, 2 workers, batch 64 each, to 0.90 test accuracy (threads $threads a process)"
  printf "%-4s %12s %12s %7s %12s %12s %7s\n" run "fulcrum s/s" "ddp s/s" ratio \
    "fulcrum to.90" "ddp to.90" ratio
  rates=() times=()
  for r in $(seq "$runs"); do
    fulcrum_torch_job "$run/cnn.yaml" 2 --eval_every 235
    read -r f_steps f_elapsed f_eval < <(summary "$run"/t-*.log)
    f_rate=$(py "print($f_steps*128/($f_elapsed-$f_eval))")
    f_to=$(grep -h 'test accuracy 0\.9' "$run"/t-*.log | head -1 | sed -E 's/.*\(([0-9.]+) s\).*/\1/')
    ddp=$(/usr/bin/python3 bench/ddp_cnn_peer.py --world 2 --threads "$threads" --eval_every 235)
    d_rate=$(echo "$ddp" | py 'import json,sys; j=json.load(sys.stdin); print(j["steps"]*128/(j["elapsed_s"]-j["eval_s"]))')
    d_to=$(echo "$ddp" | py 'import json,sys; print(json.load(sys.stdin)["to_target_s"])')
    rate_ratio=$(py "print($f_rate/$d_rate)")
    time_ratio=$(py "print(${d_to:-0}/${f_to:-1e9})")
    rates+=("$rate_ratio") times+=("$time_ratio")
    printf "%-4s %12.0f %12.0f %7.2f %12s %12.1f %7.2f\n" "$r" "$f_rate" "$d_rate" \
      "$rate_ratio" "${f_to:-none}" "$d_to" "$time_ratio"
  done
  median() { printf "%s\n" "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  echo "median fulcrum/ddp samples/s: $(median "${rates[@]}");" \
    "median ddp/fulcrum time to 0.90 (>1: Fulcrum faster): $(median "${times[@]}")"
fi

if [ "$mlp" = 1 ]; then
  for i in 1 2; do cluster_add_worker "$run" "worker-$i"; done
  cluster_wait_members 4
  # The same MLP declared by its PyTorch workers (type external), so that
  # the idle fulcrum-workers, which take built-in models, leave it to them.
  cat >"$run/mlp.yaml" <<YAML
name: mlp-torch
model: {type: external}
dataset: {sharding: chunks}
optimizer: {type: momentum, lr: 0.05, momentum: 0.9}
batch_size: 64
epochs: 100
workers: {min: 2, max: 2}
shards: 2
seed: 1
max_steps: $mlp_steps
YAML
  echo "MLP 784-256-128-10, 2 workers + 2 shards, batch 64, $mlp_steps steps"
  printf "%-4s %14s %14s %7s\n" run "pytorch s/s" "c++ s/s" ratio
  cluster_timed_job "$run" 50 2 2 >/dev/null  # warms the C++ workers' data cache
  for r in $(seq "$runs"); do
    fulcrum_torch_job "$run/mlp.yaml" 2 --model mlp --eval_every 1000000000
    read -r p_steps p_elapsed p_eval < <(summary "$run"/t-*.log)
    p_rate=$(py "print($p_steps*128/($p_elapsed-$p_eval))")
    read -r t_short _ < <(cluster_timed_job "$run" 200 2 2)
    read -r t_long _ < <(cluster_timed_job "$run" "$mlp_steps" 2 2)
    c_rate=$(py "print(($mlp_steps-200)*128/($t_long-$t_short))")
    printf "%-4s %14.0f %14.0f %7.2f\n" "$r" "$p_rate" "$c_rate" "$(py "print($p_rate/$c_rate)")"
  done
fi
cluster_stop
bazel shutdown >/dev/null 2>&1 || true
