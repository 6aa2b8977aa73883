#!/usr/bin/env bash
# The data plane alone (issue 13, item 1): the round trip of one sync step -
# every partition's push and the new parameters back - for gradients of 1,
# 4, 16 and 100 MB, W workers and S shards, beside gloo's all-reduce of the
# same size among the same number of processes (Debian's PyTorch, one thread
# each), in one run, alternating. Prints a table: median microseconds (p10-
# p90), the ratio to gloo, and the exchange's rate as a fraction of this
# machine's memcpy bandwidth measured in the same run (2 x size / time: the
# gradient goes out and the parameters come back).
#
#   bench/exchange.sh [--sizes "1 4 16 100"] [--workers "1 2 4"]
#                     [--shards "1 2"] [--steps 20] [--warmup 3]
set -euo pipefail
cd "$(dirname "$0")/.."
sizes="1 4 16 100" workers="1 2 4" shards="1 2" steps=20 warmup=3
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

source tools/lib/cluster.sh
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  apt-get install -y -qq --no-install-recommends python3-torch python3-numpy >/dev/null
fi
bazel build --noshow_progress //bench:exchange_driver //worker/capi:libfulcrum.so
cluster_build  # also shuts Bazel down
driver=bazel-bin/bench/exchange_driver lib=$PWD/bazel-bin/worker/capi/libfulcrum.so
memcpy=$("$driver" --memcpy_mb=100)
echo "memcpy: $memcpy GB/s (100 MB, this run)"
run=.fulcrum/exchange
printf "%-4s %-3s %-6s %22s %22s %8s %9s\n" S W MB "fulcrum us (p10-p90)" \
  "gloo us (p10-p90)" "f/gloo" "of memcpy"
for s in $shards; do
  cluster_start "$run" "$s"
  cluster_wait_members "$s"
  for w in $workers; do
    for mb in $sizes; do
      floats=$((mb * 262144))
      cat > "$run/job.yaml" <<YAML
name: exchange-${mb}mb
model: {type: external}
optimizer: {type: sgd, lr: 0.000001}
batch_size: 64
workers: {min: $w, max: $w}
shards: $s
eval_every_steps: 1000000
YAML
      job=$(ctl submit "$run/job.yaml")
      rm -f "$run"/driver-*
      pids=()
      for i in $(seq "$w"); do
        "$driver" --lib="$lib" --coordinator="$coord" --job="$job" \
          --floats="$floats" --steps="$steps" --warmup="$warmup" \
          >"$run/driver-$i.out" 2>"$run/driver-$i.log" &
        pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p"; done
      # The step is the slowest worker's.
      read -r f f10 f90 < <(sort -n -r "$run"/driver-*.out | head -1)
      read -r g g10 g90 < <(/usr/bin/python3 bench/gloo_allreduce.py \
        --floats="$floats" --world="$w" --steps="$steps" --warmup="$warmup")
      /usr/bin/python3 - "$s" "$w" "$mb" "$f" "$f10" "$f90" "$g" "$g10" "$g90" "$memcpy" <<'PY'
import sys
s, w, mb, f, f10, f90, g, g10, g90, memcpy = sys.argv[1:]
rate = 2 * float(mb) * (1 << 20) / (float(f) * 1e-6) / 1e9
print(f"{s:<4} {w:<3} {mb:<6} {f:>8} ({f10}-{f90})".ljust(36)
      + f" {g:>8} ({g10}-{g90})".ljust(23)
      + f" {float(f) / max(float(g), 1):8.2f} {rate / float(memcpy):8.1%}")
PY
    done
  done
  cluster_stop
done
