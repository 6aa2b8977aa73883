#!/usr/bin/env bash
# What mutual TLS costs the data plane: the same synchronous job (MLP
# 784-256-128-10, batch 64 per worker, W workers, S shards) on a plaintext
# cluster and on a mutual-TLS cluster (tools/make_certs.sh), alternately R
# times, steady-state samples/s of each and their ratio in one table.
#
#   bench/tls_cost.sh [--workers W] [--shards S] [--runs R] [--steps N]
#
# Steady state as in bench/ddp_vs_fulcrum.sh: a 200-step and an N-step job on
# the same cluster; the extra samples over the extra time.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=2 shards=2 runs=3 steps=1500 warm=200
source tools/lib/flags.sh
flags_parse workers shards runs steps -- "$@"
source tools/lib/cluster.sh
cluster_build
run=.fulcrum/bench-tls
certs=$run-certs
rm -rf "$certs"
bash tools/make_certs.sh "$certs" --days 1 >/dev/null

job_seconds() {  # STEPS -> training seconds of a job of that many steps
  cluster_timed_job "$run" "$1" "$workers" "$shards" | cut -d' ' -f1
}

measure() {  # plaintext|tls -> steady-state samples/s
  if [ "$1" = tls ]; then
    cluster_flags=(--tls_cert="$certs/tls.crt" --tls_key="$certs/tls.key" --tls_ca="$certs/ca.crt")
  else
    cluster_flags=()
  fi
  cluster_start "$run" "$shards" >/dev/null
  for i in $(seq "$workers"); do cluster_add_worker "$run" "worker-$i"; done
  cluster_wait_members $((workers + shards))
  job_seconds 50 >/dev/null  # data loaded, connections warm
  local short long
  short=$(job_seconds "$warm")
  long=$(job_seconds "$steps")
  cluster_stop
  /usr/bin/python3 -c "print(($steps - $warm) * 64 * $workers / ($long - $short))"
}

printf "%-4s %16s %16s %8s\n" run "plaintext smp/s" "mutual TLS smp/s" ratio
ratios=()
for r in $(seq "$runs"); do
  plain=$(measure plaintext)
  tls=$(measure tls)
  ratio=$(/usr/bin/python3 -c "print(f'{$tls / $plain:.2f}')")
  ratios+=("$ratio")
  printf "%-4s %16.0f %16.0f %8s\n" "$r" "$plain" "$tls" "$ratio"
done
echo "median TLS/plaintext: $(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(( (runs + 1) / 2 ))p")"
bazel shutdown >/dev/null 2>&1 || true
