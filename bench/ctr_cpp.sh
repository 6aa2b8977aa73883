#!/usr/bin/env bash
# One click-model job of fulcrum-worker (model embedding_mlp) on Criteo-format
# logs (tools/make_ctr_data's, or real ones): 2 workers and 2 shards on this
# machine; prints the test AUC, the samples/s of the job and the resident rows
# (docs/benchmarks.md, "the C++ workers"). For sweeps of the model:
#   bench/ctr_cpp.sh --data DIR [--epochs 1] [--dim 8]
#     [--model '{type: embedding_mlp, table: deep, bottom: [], top: [64, 32]}']
#     [--rows_optimizer '{type: adam, lr: 0.01}'] [--mode async] [--batch 256]
set -euo pipefail
cd "$(dirname "$0")/.."
data="" epochs=1 dim=8 mode=async batch=256
model='{type: embedding_mlp, table: deep, bottom: [], top: [64, 32]}'
rows_optimizer='{type: adam, lr: 0.01}'
source tools/lib/flags.sh
flags_parse data epochs dim model rows_optimizer mode batch -- "$@"
[ -s "$data/train.tsv" ] || { echo "--data DIR must hold train.tsv and test.tsv" >&2; exit 2; }
data=$(cd "$data" && pwd)
source tools/lib/cluster.sh
cluster_build
out=/tmp/fulcrum-bench-ctr-cpp
root=$(dirname "$data")
cluster_coordinator_flags=(--data_root="$root")
cluster_start "$out" 2
cat > "$out/job.yaml" <<YAML
name: ctr-cpp
model: $model
dataset: {dir: $data}
optimizer: {type: adam, lr: 0.001}
batch_size: $batch
epochs: $epochs
workers: {min: 2, max: 2}
shards: 2
seed: 1
consistency: {mode: $mode}
eval_every_steps: 100000000
embeddings:
  - {name: deep, dim: $dim, capacity: 8000000, optimizer: $rows_optimizer}
YAML
for r in 1 2; do cluster_add_worker "$out" "worker-$r" --data_root="$root"; done
cluster_wait_members 4
job=$(ctl submit "$out/job.yaml" | head -1)
ctl status "$job" --watch > "$out/watch.log"
ctl status "$job" --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
p = j["progress"]
secs = j["end_time_unix"] - j["start_time_unix"]
print("state %s test_auc %.4f samples_per_s %.0f seconds %.0f" % (
    j["state"], p["test_accuracy"], int(p["samples_total"]) / secs, secs))'
if command -v curl >/dev/null; then
  for p in "$out"/shard-*.metrics_port; do
    curl -s "127.0.0.1:$(cat "$p")/metrics" |
      awk '/^fulcrum_server_embedding_rows/ {s += $2} END {print s}'
  done | awk '{s += $1} END {print "resident_rows " s}'
fi
cluster_stop
