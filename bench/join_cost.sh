#!/usr/bin/env bash
# What a join costs the workers already training: a 2-worker sync job
# (reference MLP, 2 shards, 2,500 steps) takes a third worker at step 800;
# prints how many of worker-1's steps were slower than each bound of the
# step-time histogram (its /metrics) and the membership events.
#
#   bench/join_cost.sh [--bin DIR]   (DIR: a bazel-bin of another build, to
#                                     compare; default: build this tree)
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/lib/cluster.sh
if [ "${1:-}" = --bin ]; then bin=$2; else cluster_build; fi
run=.fulcrum/join
cluster_start "$run" 2 >/dev/null
cluster_add_worker "$run" worker-1
cluster_add_worker "$run" worker-2
cluster_wait_members 4
cluster_job_yaml "$run/job.yaml" 2500 2 2 3
id=$(ctl submit "$run/job.yaml")
for _ in $(seq 300); do
  s=$(ctl status "$id" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["progress"].get("step",0))')
  [ "$s" -ge 800 ] && break; sleep 0.1
done
cluster_add_worker "$run" worker-3
ctl status "$id" --watch >/dev/null
port=$(cat $run/worker-1.metrics_port)
/usr/bin/python3 - "$port" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
b = {}
for line in text.splitlines():
    if line.startswith("fulcrum_worker_step_seconds_bucket"):
        le = line.split('le="')[1].split('"')[0]
        b[le] = float(line.rsplit(" ", 1)[1])
tot = b["+Inf"]
les = sorted((float(k), v) for k, v in b.items() if k != "+Inf")
print(f"steps {tot:.0f}; slower than: " + ", ".join(f"{le:.3g} s: {tot - v:.0f}" for le, v in les if le >= 0.06))
PY
ctl status "$id" | grep -E 'joined|generation' | tail -3
cluster_stop
bazel shutdown >/dev/null 2>&1 || true
