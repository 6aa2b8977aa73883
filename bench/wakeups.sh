#!/usr/bin/env bash
# Thread wake-ups per sync step (issue 13, item 6): the reference job (MLP
# 784-256-128-10, batch 64 per worker, momentum) on 2 shards and 2 workers;
# counts every thread's context switches (/proc/PID/task/TID/status) of one
# worker and one shard over --seconds of steady state and prints them per
# step, per thread and per thread name. Voluntary switches are waits that
# ended (a wake-up each); involuntary ones, preemptions.
#
#   bench/wakeups.sh [--seconds 4] [--wire '{topk: 0.01}'] [--binaries DIR]
#
# --binaries: the binaries of another build (a bazel-bin or a copy of one, as
# bench/binaries_ab.sh takes), to count the wake-ups before a change.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=4 wire="" binaries=""
source tools/lib/flags.sh
flags_parse seconds wire binaries -- "$@"
source tools/lib/cluster.sh
cluster_build
[ -z "$binaries" ] || bin=$(cd "$binaries" && pwd)
run=.fulcrum/wakeups
cluster_start "$run" 2
shard=${cluster_pids[-1]}
cluster_add_worker "$run" worker-1
worker=${cluster_pids[-1]}
cluster_add_worker "$run" worker-2
cluster_wait_members 4
cluster_job_yaml "$run/job.yaml" 1000000 2 2
[ -n "$wire" ] && echo "wire: $wire" >> "$run/job.yaml"
id=$(ctl submit "$run/job.yaml")
step() {
  ctl status "$id" --json | /usr/bin/python3 -c \
    'import json,sys; print(json.load(sys.stdin)["progress"].get("step", 0))'
}
# "tid name voluntary involuntary" of every thread of $1.
snap() {
  for t in /proc/"$1"/task/*; do
    echo "$(basename "$t") $(tr ' ' _ < "$t/comm") $(awk \
      '/^voluntary_ctxt/{v=$2} /^nonvoluntary_ctxt/{n=$2} END{print v, n}' "$t/status")"
  done | sort
}
until [ "$(step)" -gt 200 ]; do sleep 0.5; done
s0=$(step); snap "$worker" > "$run/w0"; snap "$shard" > "$run/s0"
sleep "$seconds"
s1=$(step); snap "$worker" > "$run/w1"; snap "$shard" > "$run/s1"
ctl cancel "$id" >/dev/null 2>&1 || true
cluster_stop
steps=$((s1 - s0))
echo "steps: $steps in ${seconds} s"
for who in worker shard; do
  f=${who:0:1}
  echo "== $who: per step, voluntary / involuntary, by thread"
  join "$run/${f}0" "$run/${f}1" | awk -v n="$steps" \
    '{d=$6-$3; e=$7-$4; if (d+e>0) printf "  %-8s %-16s %7.2f %7.2f\n", $1, $2, d/n, e/n}' |
    sort -k3 -rn
  join "$run/${f}0" "$run/${f}1" | awk -v n="$steps" \
    '{v+=$6-$3; i+=$7-$4} END{printf "  all threads               %7.2f %7.2f\n", v/n, i/n}'
done
