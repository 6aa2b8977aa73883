#!/usr/bin/env bash
# Fulcrum sync training vs PyTorch DDP (gloo) on the same machine, same work:
# MLP 784-256-128-10 on Fashion-MNIST, batch 64 per worker, momentum SGD,
# W workers (default 2). Runs the two alternately R times and prints one
# table of steady-state samples/s with the ratio. With --workers 1 the peer
# is one plain PyTorch process (no process group, no DDP wrapper: the
# "one plain process" of the goals); --peer ddp keeps DDP of world size 1.
#
#   bench/ddp_vs_fulcrum.sh [--workers W] [--shards S] [--runs R] [--steps N]
#                           [--worker_flags "--shared_memory=false"]
#                           [--peer ddp|plain]
#
# Steady state: DDP times steps after a 200-step warm-up inside the run.
# Fulcrum runs a 200-step job and an N-step job on the same cluster and
# divides the extra samples by the extra time, so start-up, data loading and
# the final evaluation cancel out.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=2 shards=2 runs=3 steps=2000 warm=200 worker_flags="" peer=""
source tools/lib/flags.sh
flags_parse workers shards runs steps worker_flags peer -- "$@"

if [ -z "$peer" ]; then
  if [ "$workers" = 1 ]; then peer=plain; else peer=ddp; fi
fi
case "$peer" in
  ddp) peer_flags="" ;;
  plain)
    [ "$workers" = 1 ] || { echo "--peer plain needs --workers 1" >&2; exit 2; }
    peer_flags="--plain" ;;
  *) echo "--peer must be ddp or plain, not '$peer'" >&2; exit 2 ;;
esac
source tools/lib/cluster.sh
# The peer (bench only): Debian's PyTorch 1.13.
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  apt-get install -y -qq --no-install-recommends python3-torch python3-numpy >/dev/null
fi
cluster_build
run=.fulcrum/bench
cluster_start "$run" "$shards"
# shellcheck disable=SC2086  # the flags are words
for i in $(seq "$workers"); do cluster_add_worker "$run" "worker-$i" $worker_flags; done
cluster_wait_members $((workers + shards))

# Runs a job of $1 steps; prints its training seconds and test accuracy.
fulcrum_job() { cluster_timed_job "$run" "$1" "$workers" "$shards"; }

fulcrum_job 50 >/dev/null  # loads the data into the workers' caches
printf "%-4s %14s %14s %8s %10s %10s\n" run "fulcrum smp/s" "$peer smp/s" ratio "fulcrum acc" "$peer acc"
results=()
for r in $(seq "$runs"); do
  read -r t_short _ < <(fulcrum_job "$warm")
  read -r t_long f_acc < <(fulcrum_job "$steps")
  f_rate=$(/usr/bin/python3 -c "print(($steps-$warm)*64*$workers/($t_long-$t_short))")
  # shellcheck disable=SC2086  # no flags or one
  ddp=$(/usr/bin/python3 bench/ddp_peer.py $peer_flags --world "$workers" --steps "$steps" --warmup "$warm")
  d_rate=$(echo "$ddp" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_sec"])')
  d_acc=$(echo "$ddp" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["test_accuracy"])')
  ratio=$(/usr/bin/python3 -c "print($f_rate/$d_rate)")
  results+=("$ratio")
  printf "%-4s %14.0f %14.0f %8.2f %10.4f %10.4f\n" "$r" "$f_rate" "$d_rate" "$ratio" "$f_acc" "$d_acc"
done
median=$(printf "%s\n" "${results[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "median ratio fulcrum/$peer: $median  (workers $workers, shards $shards, $steps steps, batch 64/worker)"
