#!/usr/bin/env bash
# Local pre-reduction (wire.pre_reduce) on vs off, side by side: the
# reference MLP job (784-256-128-10, batch 64 per worker) with W workers
# and S shards on this host, one cluster, the two alternating R times.
# Prints steady-state samples/s of each and the ratio on/off.
#
#   bench/pre_reduce.sh [--workers W] [--shards S] [--runs R] [--steps N]
#
# Steady state as in ddp_vs_fulcrum.sh: a 200-step job and an N-step job,
# the extra samples over the extra time.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=2 shards=2 runs=3 steps=2000 warm=200
source tools/lib/flags.sh
flags_parse workers shards runs steps -- "$@"

source tools/lib/cluster.sh
cluster_build
run=.fulcrum/bench-pre-reduce
cluster_start "$run" "$shards"
for i in $(seq "$workers"); do cluster_add_worker "$run" "worker-$i"; done
cluster_wait_members $((workers + shards))

# Steady-state samples/s of the job with $1 as its wire.pre_reduce.
rate() {
  local t_short t_long
  cluster_job_extra="wire: {pre_reduce: $1}"
  read -r t_short _ < <(cluster_timed_job "$run" "$warm" "$workers" "$shards")
  read -r t_long _ < <(cluster_timed_job "$run" "$steps" "$workers" "$shards")
  /usr/bin/python3 -c "print(($steps-$warm)*64*$workers/($t_long-$t_short))"
}

cluster_timed_job "$run" 50 "$workers" "$shards" >/dev/null  # data into the caches
printf "%-4s %16s %16s %8s\n" run "off smp/s" "pre_reduce smp/s" "on/off"
results=()
for r in $(seq "$runs"); do
  off=$(rate false)
  on=$(rate true)
  ratio=$(/usr/bin/python3 -c "print($on/$off)")
  results+=("$ratio")
  printf "%-4s %16.0f %16.0f %8.2f\n" "$r" "$off" "$on" "$ratio"
done
median=$(printf "%s\n" "${results[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "median pre_reduce/off: $median  (workers $workers, shards $shards, $steps steps, batch 64/worker)"
cluster_stop
