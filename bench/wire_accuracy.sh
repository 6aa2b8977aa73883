#!/usr/bin/env bash
# What compressed wires cost in learning (issue 13): the reference job (MLP
# 784-256-128-10 on Fashion-MNIST, batch 64 per worker, momentum SGD) to a
# target test accuracy with each `wire:` setting, alternating in one run on
# one cluster. Prints, per run, the steps and seconds to the target and the
# final accuracy, then the medians and each setting's ratio to fp32.
#
#   bench/wire_accuracy.sh [--runs 3] [--target 0.88] [--workers 2]
#       [--shards 2] [--wires "fp32/fp32 bf16/fp32 fp16/fp32 bf16/bf16"]
#       [--link RATE]  # the workers behind a link of RATE (root; see
#                      # tools/lib/link.sh), payloads over TCP through it
#
# A wire is GRADIENTS/PARAMETERS[/TOPK[/WARMUP]] (wire.gradients /
# wire.parameters / wire.topk / wire.topk_warmup_steps, e.g. fp32/fp32/0.01:
# top-k at 1% with error feedback; fp32/fp32/0.01/500: warmed up over 500
# steps); TOPK written rF is wire.randomk F instead (fp32/fp32/r0.01:
# random-k at 1%).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3 target=0.88 workers=2 shards=2 link=""
wires="fp32/fp32 bf16/fp32 fp16/fp32 bf16/bf16"
source tools/lib/flags.sh
flags_parse runs target workers shards wires link -- "$@"
source tools/lib/cluster.sh
cluster_build
run=.fulcrum/wire
worker_flags=()
if [ -n "$link" ]; then
  # The workers behind a link of $link each way (tools/lib/link.sh), their
  # payloads over TCP through it.
  source tools/lib/link.sh
  link_cluster "$link"
  worker_flags=(--shared_memory=false)
fi
cluster_start "$run" "$shards"
[ -z "$link" ] || link_guard
for i in $(seq "$workers"); do
  cluster_add_worker "$run" "worker-$i" "${worker_flags[@]}"
done
cluster_wait_members $((workers + shards))
results=$run/results.txt
: > "$results"
printf "%-4s %-10s %7s %8s %8s\n" run wire steps seconds accuracy
for r in $(seq "$runs"); do
  for wire in $wires; do
    cluster_job_yaml "$run/job.yaml" 20000 "$workers" "$shards"
    sed -i 's/^eval_every_steps: .*/eval_every_steps: 100/' "$run/job.yaml"
    IFS=/ read -r grads params topk warmup <<< "$wire"
    sparse=topk
    if [[ $topk == r* ]]; then sparse=randomk topk=${topk#r}; fi
    cat >> "$run/job.yaml" <<YAML
target_accuracy: $target
wire: {gradients: $grads, parameters: $params${topk:+, $sparse: $topk}${warmup:+, topk_warmup_steps: $warmup}}
YAML
    id=$(ctl submit "$run/job.yaml")
    ctl status "$id" --watch >/dev/null || true  # a failed job is a row too
    # A job that failed (a wire that diverged: the shards refuse a NaN)
    # or ended at max_steps short of the target is marked so, not timed.
    # One status read: steps, seconds, accuracy, state, then the message.
    { read -r steps secs acc state; read -r message; } < <(ctl status "$id" --json | /usr/bin/python3 -c \
      'import json,sys; j=json.load(sys.stdin); p=j.get("progress", {}); print(p.get("step", 0), j["end_time_unix"]-j["start_time_unix"], p.get("test_accuracy", 0), j["state"]); print(" ".join(j.get("message", "").split())[:120])')
    if [ "$state" != SUCCEEDED ]; then
      note="$state: $message"
    elif /usr/bin/python3 -c "import sys; sys.exit(float('$acc') < float('$target'))"; then
      note=""
    else
      note="not reached by step $steps"
    fi
    printf "%-4s %-10s %7s %8.1f %8.4f %s\n" "$r" "$wire" "$steps" "$secs" "$acc" "$note"
    if [ -z "$note" ]; then echo "$wire $steps $secs $acc" >> "$results"; fi
  done
done
cluster_stop
if [ -n "$link" ]; then link_down; fi
/usr/bin/python3 - "$results" "$target" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for wire, steps, secs, acc in rows:
    by.setdefault(wire, []).append((int(steps), float(secs), float(acc)))
base = by.get("fp32/fp32")
print(f"\nmedians to {sys.argv[2]}:")
print(f"{'wire':<10} {'steps':>7} {'seconds':>8} {'steps/fp32':>11} {'time/fp32':>10}")
print("(runs that failed or missed the target are left out; the rows above say which)")
for wire, v in by.items():
    s = statistics.median(x[0] for x in v); t = statistics.median(x[1] for x in v)
    rs = s / statistics.median(x[0] for x in base) if base else float("nan")
    rt = t / statistics.median(x[1] for x in base) if base else float("nan")
    print(f"{wire:<10} {s:>7.0f} {t:>8.1f} {rs:>11.2f} {rt:>10.2f}")
PY
