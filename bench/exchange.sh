#!/usr/bin/env bash
# The data plane alone (issue 13): the round trip of one sync step - every
# partition's push and the new parameters back - for gradients of 1, 4, 16
# and 100 MB, W workers and S shards, beside gloo's all-reduce of the same
# size among the same number of processes (Debian's PyTorch, one thread
# each), in one run, alternating (at least 100 steps below 16 MB). Prints a table: median microseconds (p10-
# p90), the ratio to gloo, and the exchange's rate as a fraction of this
# machine's memcpy bandwidth measured in the same run (2 x fp32 size / time:
# the gradient goes out and the parameters come back).
#
#   bench/exchange.sh [--sizes "1 4 16 100"] [--workers "1 2 4"]
#                     [--shards "1 2"] [--steps 20] [--warmup 3]
#                     [--wire "fp32 bf16 bf16/bf16 fp32:0.01"]
#                         # the wires to run, each a row: wire.gradients,
#                         # /P adds wire.parameters P (else --params),
#                         # :F adds wire.topk F
#                     [--params fp32|bf16]         # wire.parameters
#                     [--baseline BIN]             # an older build, alternated
#                     [--transports "shm tcp group"] # how payloads travel
#                     [--link RATE]  # workers behind a link of RATE (root)
#
# Workers and shards share this host, so payloads go through shared memory
# by default (shm); tcp runs the workers with FULCRUM_SHARED_MEMORY=0 (the
# shards then carry payloads in the stream's messages); both with
# wire.pre_reduce false, every worker its own streams. group: the workers
# form a host group (wire.pre_reduce: true; off by default) and the
# leader pushes their sum over shared memory (dense wires only). Each listed
# transport is a row, alternating within the same cluster.
#
# --baseline BIN (a bazel-bin of another commit, with bench/exchange_driver,
# worker/capi/libfulcrum.so and the cluster binaries) runs the same rows
# (the same wires) on that build's own cluster, alternating with this one, and adds its
# time and the ratio new / baseline: before-and-after in one script.
#
# --link RATE (e.g. 1gbit; needs root and iproute2: tools/lib/link.sh) puts
# the workers in a network namespace joined to the shards' by a link shaped
# to RATE each way, as if the workers ran on another host: payloads go over
# TCP through it (--transports tcp only), and the gloo column is left out
# (its ranks would talk over their own loopback, not the link).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes="1 4 16 100" workers="1 2 4" shards="1 2" steps=20 warmup=3
wire="fp32" params=fp32 baseline="" transports="shm" link=""
source tools/lib/flags.sh
flags_parse sizes workers shards steps warmup wire params baseline transports \
  link -- "$@"
wires=$wire
[ -n "$baseline" ] && baseline=$(cd "$baseline" && pwd)

source tools/lib/cluster.sh
if [ -n "$link" ]; then
  if [ "$transports" != tcp ]; then
    echo "--link carries payloads over TCP: use --transports tcp" >&2
    exit 2
  fi
  source tools/lib/link.sh
  link_cluster "$link"
fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  apt-get install -y -qq --no-install-recommends python3-torch python3-numpy >/dev/null
fi
bazel build --noshow_progress //bench:exchange_driver //worker/capi:libfulcrum.so
cluster_build  # also shuts Bazel down
this_bin=$bin
memcpy=$("$this_bin/bench/exchange_driver" --memcpy_mb=100)
echo "memcpy: $memcpy GB/s (100 MB, this run)"
run=.fulcrum/exchange

# One Fulcrum row on the cluster at $coord built in $1: prints
# "median p10 p90" of the slowest worker.
fulcrum_row() {
  local b=$1 w=$2 mb=$3 wire=$4 dir=$5
  local floats=$((mb * 262144)) n=$steps
  # Small exchanges are short and noisy: at least 100 steps below 16 MB.
  [ "$mb" -lt 16 ] && [ "$n" -lt 100 ] && n=100
  # group: the host group pre-reduces (wire.pre_reduce); shm and tcp:
  # every worker its own streams.
  # (A --baseline build must know wire.pre_reduce: 2026-12-05 or later.)
  local fields="pre_reduce: false"
  [ "${transport:-shm}" = group ] && fields="pre_reduce: true"
  local grads=${wire%%[:/]*} back=$params topk=""
  [[ $wire == */* ]] && back=${wire#*/} && back=${back%%:*}
  [[ $wire == *:* ]] && topk=", topk: ${wire#*:}"
  if [ "$grads" != fp32 ] || [ "$back" != fp32 ] || [ -n "$topk" ]; then
    fields="gradients: $grads, parameters: $back$topk${fields:+, $fields}"
  fi
  local extra=""
  [ -n "$fields" ] && extra="wire: {$fields}"
  cat > "$dir/job.yaml" <<YAML
name: exchange-${mb}mb
model: {type: external}
optimizer: {type: sgd, lr: 0.000001}
batch_size: 64
workers: {min: $w, max: $w}
shards: $s
eval_every_steps: 1000000
$extra
YAML
  local job pids=() i
  job=$(bin=$b ctl submit "$dir/job.yaml")
  rm -f "$dir"/driver-*
  local shm=1
  [ "${transport:-shm}" = tcp ] && shm=0
  for i in $(seq "$w"); do
    FULCRUM_SHARED_MEMORY=$shm "${cluster_worker_prefix[@]}" "$b/bench/exchange_driver" \
      --lib="$b/worker/capi/libfulcrum.so" \
      --coordinator="$coord" --job="$job" --floats="$floats" \
      --steps="$n" --warmup="$warmup" \
      >"$dir/driver-$i.out" 2>"$dir/driver-$i.log" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  sort -n -r "$dir"/driver-*.out | head -1  # the step is the slowest worker's
}

# The row of this build / of the baseline (sets f f10 f90 / b b10 b90).
run_new() {
  coord=$this_coord
  read -r f f10 f90 < <(fulcrum_row "$this_bin" "$w" "$mb" "$wire" "$run")
}
run_base() {
  coord=$base_coord
  read -r b b10 b90 < <(fulcrum_row "$baseline" "$w" "$mb" "$wire" "$run-base")
}

row=0
printf "%-3s %-3s %-5s %-9s %-4s %22s %22s %7s %9s" S W MB wire via \
  "fulcrum us (p10-p90)" "gloo us (p10-p90)" "f/gloo" "of memcpy"
[ -n "$baseline" ] && printf " %22s %8s" "baseline us" "new/base"
echo
for s in $shards; do
  if [ -n "$baseline" ]; then
    bin=$baseline cluster_start "$run-base" "$s"
    [ -z "$link" ] || link_guard
    base_coord=$coord
    bin=$baseline cluster_wait_members "$s"
  fi
  bin=$this_bin cluster_start "$run" "$s"
  [ -z "$link" ] || link_guard
  this_coord=$coord
  bin=$this_bin cluster_wait_members "$s"
  for w in $workers; do
    for mb in $sizes; do
      floats=$((mb * 262144)) n=$steps
      [ "$mb" -lt 16 ] && [ "$n" -lt 100 ] && n=100
      g=- g10=- g90=-
      if [ -z "$link" ]; then
        read -r g g10 g90 < <(/usr/bin/python3 bench/gloo_allreduce.py \
          --floats="$floats" --world="$w" --steps="$n" --warmup="$warmup")
      fi
      for wire in $wires; do
      for transport in $transports; do
        # With a baseline, the two builds take turns going first (the
        # first run after gloo's is not the same machine as the second).
        b="" b10="" b90=""
        if [ -n "$baseline" ]; then
          row=$((row + 1))
          if [ $((row % 2)) -eq 0 ]; then run_base; run_new; else run_new; run_base; fi
        else
          run_new
        fi
        /usr/bin/python3 - "$s" "$w" "$mb" "$wire" "$transport" "$f" "$f10" "$f90" "$g" "$g10" "$g90" "$memcpy" "$b" "$b10" "$b90" <<'PY'
import sys
s, w, mb, wire, via, f, f10, f90, g, g10, g90, memcpy, b, b10, b90 = sys.argv[1:]
rate = 2 * float(mb) * (1 << 20) / (float(f) * 1e-6) / 1e9
ratio = "-" if g == "-" else f"{float(f) / max(float(g), 1):.2f}"
line = (f"{s:<3} {w:<3} {mb:<5} {wire:<9} {via:<4} " + f"{f:>8} ({f10}-{f90})".ljust(23)
        + f" {g:>8} ({g10}-{g90})".ljust(23)
        + f" {ratio:>7} {rate / float(memcpy):8.1%}")
if b:
    line += f" {b:>8} ({b10}-{b90})".ljust(23) + f" {float(f) / float(b):8.2f}"
print(line)
PY
      done
      done
    done
  done
  cluster_stop
done
if [ -n "$link" ]; then link_down; fi
