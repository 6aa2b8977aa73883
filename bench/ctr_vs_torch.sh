#!/usr/bin/env bash
# The wide & deep click model (examples/torch/ctr) on generated Criteo-format
# logs: 2 PyTorch workers on a Fulcrum job (2 shards, the categories' rows in
# embedding tables) beside one plain PyTorch process with
# nn.EmbeddingBag(sparse=True) + SparseAdam, and 2 C++ workers
# (fulcrum-worker, model embedding_mlp: the deep part alone - one dim-8 table
# for the 26 fields, no bottom MLP, top 64-32-1), in one script: test AUC
# against the planted model's, and samples/s as a ratio (docs/benchmarks.md,
# "Embedding rows").
#   bench/ctr_vs_torch.sh [--train N] [--test N] [--vocab N] [--epochs E] [--threads T]
set -euo pipefail
cd "$(dirname "$0")/.."
train=1000000 test=100000 vocab=2000000 epochs=1 threads=1
source tools/lib/flags.sh
flags_parse train test vocab epochs threads -- "$@"
source tools/lib/cluster.sh
cluster_build
cluster_build_torch
out=/tmp/fulcrum-bench-ctr
data=$out/data-$train-$test-$vocab
if [ ! -s "$data/planted.txt" ]; then
  tools/make_ctr_data --out "$data" --train "$train" --test "$test" \
    --largest_vocab "$vocab" >/dev/null
fi
planted=$(awk '/planted_auc/ {print $2}' "$data/planted.txt")
distinct=$(awk '/distinct_categories/ {print $2}' "$data/planted.txt")

# Fulcrum: 2 workers, 2 shards; the global batch is 2 x 256.
cluster_start "$out/cluster" 2
sed "s/^epochs: 1$/epochs: $epochs/" examples/torch/ctr/ctr.yaml > "$out/ctr.yaml"
for _ in $(seq 100); do ctl members 2>/dev/null | grep -c " shard " | grep -q 2 && break; sleep 0.1; done
job=$(ctl submit "$out/ctr.yaml" | head -1)
for r in 0 1; do
  PYTHONPATH="$PWD/client/python:$PWD/examples/torch/ctr" \
    FULCRUM_LIB="$bin/worker/capi/libfulcrum.so" PYTHONUNBUFFERED=1 \
    /usr/bin/python3 examples/torch/ctr/fulcrum_ctr.py --coordinator="$coord" \
    --job "$job" --data "$data" --threads "$threads" >"$out/worker-$r.log" 2>&1 &
  cluster_pids+=($!)
done
for _ in $(seq 36000); do
  [ "$(grep -l '^summary' "$out"/worker-*.log 2>/dev/null | wc -l)" = 2 ] && break
  sleep 0.1
done
grep -h "done at\|summary" "$out"/worker-*.log || { tail -20 "$out"/worker-*.log; exit 1; }
f_auc=$(awk '/test auc/ {print $7}' "$out"/worker-*.log | head -1)
# Samples/s of the job: all samples over the slower worker's time.
f_rate=$(awk '/^summary/ {s += $7; if ($9 > t) t = $9} END {printf "%.0f", s / t}' \
  "$out"/worker-*.log)
resident="n/a (no curl)"
if command -v curl >/dev/null; then
  resident=$(for p in "$out"/cluster/shard-*.metrics_port; do
    curl -s "127.0.0.1:$(cat "$p")/metrics" |
      awk '/^fulcrum_server_embedding_rows/ {s += $2} END {print s}'
  done | awk '{s += $1} END {print s}')
fi
cluster_stop

# Fulcrum C++ workers: the same data, tables' optimizer, batch and mode.
cluster_coordinator_flags=(--data_root="$out")
cluster_start "$out/cpp" 2
cat > "$out/cpp.yaml" <<YAML
name: ctr-embedding-mlp
model: {type: embedding_mlp, table: deep, bottom: [], top: [64, 32]}
dataset: {dir: $data}
optimizer: {type: adam, lr: 0.001}
batch_size: 256
epochs: $epochs
workers: {min: 2, max: 2}
shards: 2
seed: 1
consistency: {mode: async}
eval_every_steps: 100000000
embeddings:
  - {name: deep, dim: 8, capacity: 8000000, optimizer: {type: adam, lr: 0.01}}
YAML
for r in 1 2; do cluster_add_worker "$out/cpp" "worker-$r" --data_root="$out" --threads="$threads"; done
cluster_wait_members 4
job=$(ctl submit "$out/cpp.yaml" | head -1)
ctl status "$job" --watch > "$out/cpp-watch.log"
read -r c_auc c_rate < <(ctl status "$job" --json | /usr/bin/python3 -c \
  'import json,sys; j=json.load(sys.stdin); p=j["progress"]; print("%.4f" % p["test_accuracy"], "%.0f" % (int(p["samples_total"]) / (j["end_time_unix"] - j["start_time_unix"])))')
cluster_stop
cluster_coordinator_flags=()

# Plain PyTorch: one process, the same global batch and epochs.
/usr/bin/python3 examples/torch/ctr/plain_ctr.py --data "$data" --batch 512 \
  --epochs "$epochs" --threads "$threads" > "$out/plain.log" 2>&1
cat "$out/plain.log"
p_auc=$(awk '/test auc/ {print $4}' "$out/plain.log")
p_rate=$(awk '/^summary/ {print $7}' "$out/plain.log")
echo
printf "data: %d train / %d test lines, %s distinct categories; planted AUC %s\n" \
  "$train" "$test" "$distinct" "$planted"
printf "%-34s %10s %14s %10s\n" "" "test AUC" "samples/s" "ratio"
printf "%-34s %10s %14s %10s\n" "plain PyTorch, 1 process" "$p_auc" "$p_rate" "1.00"
printf "%-34s %10s %14s %10.2f\n" "Fulcrum, 2 workers + 2 shards" "$f_auc" "$f_rate" \
  "$(echo "$f_rate / $p_rate" | bc -l)"
printf "%-34s %10s %14s %10.2f\n" "Fulcrum C++, 2 workers + 2 shards" "$c_auc" "$c_rate" \
  "$(echo "$c_rate / $p_rate" | bc -l)"
echo "resident rows on the shards at the end: $resident"
