#!/usr/bin/env bash
# How many partitions a shard should hold (issue 13, item 6): the reference
# job's steady-state samples/s for each job-spec partition_bytes, in one
# cluster per run, the sizes alternating within the run (as
# bench/binaries_ab.sh times a build: an N-step job minus a 200-step job).
# Smaller partitions mean more of them per shard: more, smaller messages,
# and more overlap of the exchange with backward and the next forward.
#
#   bench/partitions.sh [--bytes "4194304 65536 32768 16384"] [--workers 2]
#                       [--shards 2] [--runs 3] [--steps 2000]
#
# The default 4 MiB leaves the layout's own cut (about 4 partitions a
# shard: docs/architecture.md, "Parameter layout"; for the reference MLP
# at 2 shards ~118 KB each), each smaller value caps a partition at that
# many bytes (65536: ~8 a shard, 32768: ~15, 16384: ~29). Prints each
# run's rates and each size's median rate over the first size's.
set -euo pipefail
cd "$(dirname "$0")/.."
bytes="4194304 65536 32768 16384" workers=2 shards=2 runs=3 steps=2000
warm=200
source tools/lib/flags.sh
flags_parse bytes workers shards runs steps -- "$@"
source tools/lib/cluster.sh
cluster_build
read -r -a sizes <<<"$bytes"

# Steady-state samples/s of the reference job with partition_bytes $1 on
# the running cluster.
rate() {
  local run=$1 t_short t_long
  cluster_job_extra="partition_bytes: $2"
  read -r t_short _ < <(cluster_timed_job "$run" "$warm" "$workers" "$shards")
  read -r t_long _ < <(cluster_timed_job "$run" "$steps" "$workers" "$shards")
  /usr/bin/python3 -c "print(($steps - $warm) * 64 * $workers / ($t_long - $t_short))"
}

printf "%-4s" run
for b in "${sizes[@]}"; do printf " %14s" "$b B smp/s"; done
echo
declare -A all
for r in $(seq "$runs"); do
  run=.fulcrum/partitions
  cluster_start "$run" "$shards"
  for i in $(seq "$workers"); do cluster_add_worker "$run" "worker-$i"; done
  cluster_wait_members $((workers + shards))
  cluster_job_extra=""
  cluster_timed_job "$run" 50 "$workers" "$shards" >/dev/null  # load the data
  printf "%-4s" "$r"
  for b in "${sizes[@]}"; do
    x=$(rate "$run" "$b")
    all[$b]="${all[$b]:-} $x"
    printf " %14.0f" "$x"
  done
  echo
  cluster_stop
done
first=${sizes[0]}
for b in "${sizes[@]}"; do
  /usr/bin/python3 - "$b" "${all[$b]}" "${all[$first]}" "$workers" "$shards" <<'PY'
import statistics, sys
b, xs, base, w, s = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4], sys.argv[5]
ratios = [float(x) / float(y) for x, y in zip(xs, base)]
print(f"partition_bytes {b}: median {statistics.median(map(float, xs)):.0f} samples/s, "
      f"per run / the first size {' / '.join(f'{q:.3f}' for q in ratios)}, "
      f"median {statistics.median(ratios):.3f}  (workers {w}, shards {s})")
PY
done
