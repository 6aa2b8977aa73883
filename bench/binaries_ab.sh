#!/usr/bin/env bash
# Two builds of Fulcrum on the same work, alternately, in one script: how a
# change that must not cost speed (a refactoring, a new check on the hot
# path) is measured on these noisy machines. Each run starts a cluster
# (1 coordinator, S shards, W workers) from one build, times the reference
# job in steady state as bench/ddp_vs_fulcrum.sh does (an N-step job minus
# a 200-step job), stops it, then does the same with the other build.
#
#   bench/binaries_ab.sh A_BIN B_BIN [--runs R] [--steps N] [--workers W] [--shards S]
#
# A bin directory holds server/coordinator/fulcrum-coordinator,
# server/ps/fulcrum-server, worker/fulcrum-worker and client/fulcrumctl:
# a bazel-bin, or a copy of one (build the other commit in a git worktree).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,14p "$0" >&2; exit 2; }
a_bin=$(cd "$1" && pwd) b_bin=$(cd "$2" && pwd)
shift 2
workers=2 shards=2 runs=3 steps=2000 warm=200
source tools/lib/flags.sh
flags_parse workers shards runs steps -- "$@"
source tools/lib/cluster.sh
bash tools/setup.sh

# Steady-state samples/s of the build in $1.
rate() {
  bin=$1
  local run=.fulcrum/ab t_short t_long acc
  cluster_start "$run" "$shards"
  for i in $(seq "$workers"); do cluster_add_worker "$run" "worker-$i"; done
  cluster_wait_members $((workers + shards))
  cluster_timed_job "$run" 50 "$workers" "$shards" >/dev/null  # load the data
  read -r t_short _ < <(cluster_timed_job "$run" "$warm" "$workers" "$shards")
  read -r t_long acc < <(cluster_timed_job "$run" "$steps" "$workers" "$shards")
  cluster_stop
  /usr/bin/python3 -c "print(($steps - $warm) * 64 * $workers / ($t_long - $t_short))"
}

printf "%-4s %12s %12s %8s\n" run "A smp/s" "B smp/s" "B/A"
ratios=()
for r in $(seq "$runs"); do
  a=$(rate "$a_bin")
  b=$(rate "$b_bin")
  ratio=$(/usr/bin/python3 -c "print($b / $a)")
  ratios+=("$ratio")
  printf "%-4s %12.0f %12.0f %8.3f\n" "$r" "$a" "$b" "$ratio"
done
median=$(printf "%s\n" "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "median B/A: $median  (workers $workers, shards $shards, $steps steps, batch 64/worker)"
