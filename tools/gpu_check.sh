#!/usr/bin/env bash
# Every GPU verification of the CUDA backend (issue 6) in one script, for a
# machine with an NVIDIA GPU and /usr/local/cuda but none of our Debian
# libraries and no network:
#
#   tools/gpu_check.sh --prepare DIR [CTR_DIR]
#                                      # here: build, then put the binaries,
#                                      # every shared library they load (the
#                                      # C library and its loader included,
#                                      # CUDA's own excepted) and the dataset
#                                      # into DIR
#   DIR/gpu_check.sh                   # there: run everything, print one table
#
# The run: the CUDA backend's tests (each kernel and a whole training step
# against the CPU backend), a 2-worker Fashion-MNIST job sharing one GPU to
# its target, the same job's first steps on the CPU for the per-step compute
# time, the per-step benchmark next to PyTorch on the same GPU, and, with
# click logs carried (CTR_DIR: train.tsv, test.tsv, planted.txt), the click
# model (embedding_mlp) trained by 2 workers on the GPU and on the CPU.
set -uo pipefail

prepare() {
  local out=$1 here
  here=$(cd "$(dirname "$0")/.." && pwd)
  cd "$here"
  local targets="//worker/backend:cuda_backend_test //bench:gpu_step
    //server/coordinator:fulcrum-coordinator //server/ps:fulcrum-server
    //worker:fulcrum-worker //client:fulcrumctl
    //worker/backend:libfulcrum_cuda.so"
  bazel build --noshow_progress $targets || exit 1
  rm -rf "$out"; mkdir -p "$out/bin" "$out/lib" "$out/data" "$out/bench"
  local bins="worker/backend/cuda_backend_test bench/gpu_step
    server/coordinator/fulcrum-coordinator server/ps/fulcrum-server
    worker/fulcrum-worker client/fulcrumctl worker/backend/libfulcrum_cuda.so" b lib
  for b in $bins; do
    cp "bazel-bin/$b" "$out/bin/"
    # Every library it loads, except CUDA's (the GPU machine has those).
    ldd "bazel-bin/$b" | awk '/=> \// {print $3} /^\s*\/lib64\// {print $1}' |
      grep -v '^/usr/local/cuda' | while read -r lib; do
        cp -L -n "$lib" "$out/lib/" 2>/dev/null || true
      done
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$out/lib/"
  cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$out/data/"
  cp bench/torch_gpu_step.py "$out/bench/"
  # One compressed bundle keeps DIR under the 64 MiB a device run carries.
  tar -C "$out" -cf - bin lib bench | xz -T2 -4 >"$out/bundle.tar.xz"
  rm -rf "$out/bin" "$out/lib" "$out/bench"
  cp "$0" "$out/gpu_check.sh"
  bazel shutdown >/dev/null 2>&1
  du -sh "$out"
}

if [ "${1:-}" = "--prepare" ]; then
  prepare "${2:?usage: tools/gpu_check.sh --prepare DIR [CTR_DIR]}"
  if [ -n "${3:-}" ]; then  # click logs (tools/make_ctr_data) for the click model
    tar -C "$3" -cf - train.tsv test.tsv planted.txt | xz -T2 -6 >"$2/ctr.tar.xz"
    du -sh "$2"
  fi
  exit 0
fi

# ---- the run, from DIR ----
D=$(cd "$(dirname "$0")" && pwd)
DATA=$D/data
if [ -f "$D/bundle.tar.xz" ]; then  # unpack the binaries and libraries
  unpacked=$(mktemp -d /tmp/fulcrum-bundle.XXXXXX)
  tar -C "$unpacked" -xJf "$D/bundle.tar.xz" || exit 1
  D=$unpacked
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# Run through the carried loader, /proc/self/exe is the loader: name the
# worker's CUDA plugin explicitly.
export FULCRUM_CUDA_PLUGIN=$D/bin/libfulcrum_cuda.so
run() {  # a carried binary through the carried loader and libraries
  local b=$1; shift
  "$D/lib/ld-linux-x86-64.so.2" --library-path "$D/lib:/usr/local/cuda/lib64" \
    "$D/bin/$b" "$@"
}
work=$(mktemp -d /tmp/fulcrum-gpu.XXXXXX)
pids=()
cleanup() {
  [ ${#pids[@]} -eq 0 ] && return
  kill "${pids[@]}" 2>/dev/null; sleep 1; kill -9 "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
}
trap cleanup EXIT
gpu=none
command -v nvidia-smi >/dev/null && gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $gpu"

# 1. Kernel and training-step tests.
run cuda_backend_test --gtest_output=xml:"$work/cuda_test.xml" >"$work/cuda_test.log" 2>&1
tests_rc=$?
tests=$(grep -o '<testsuites [^>]*>' "$work/cuda_test.xml" 2>/dev/null |
  sed -E 's/.* tests="([0-9]+)".* failures="([0-9]+)".*/\1 tests, \2 failed/')
skipped=$(grep -c '<skipped' "$work/cuda_test.xml" 2>/dev/null || true)
echo "cuda_backend_test: exit $tests_rc, $tests, $skipped skipped"

# 2. A local cluster; a 2-worker job on one device, to the target.
start() {  # log binary args...: in the background, its pid in pids
  local log=$1 b=$2; shift 2
  "$D/lib/ld-linux-x86-64.so.2" --library-path "$D/lib:/usr/local/cuda/lib64" \
    "$D/bin/$b" "$@" >"$log" 2>&1 </dev/null &
  pids+=($!)
}
cluster() {  # device tag; sets COORD
  local device=$1 tag=$2 i
  rm -f "$work/coordinator.port"
  start "$work/coordinator-$tag.log" fulcrum-coordinator \
    --listen=127.0.0.1:0 --port_file="$work/coordinator.port" --heartbeat_ms=200 \
    --data_root="$(dirname "$DATA")"
  for i in $(seq 100); do [ -s "$work/coordinator.port" ] && break; sleep 0.1; done
  COORD=127.0.0.1:$(cat "$work/coordinator.port")
  start "$work/shard-$tag.log" fulcrum-server --listen=127.0.0.1:0 \
    --coordinator="$COORD"
  for i in 1 2; do
    start "$work/worker$i-$tag.log" fulcrum-worker --coordinator="$COORD" \
      --device="$device" --max_jobs=1 --data_root="$(dirname "$DATA")"
  done
}
job() {  # name max_steps target
  cat >"$work/$1.yaml" <<YAML
name: $1
model: {type: mlp, layers: [784, 256, 128, 10]}
dataset: {dir: $DATA}
optimizer: {type: momentum, lr: 0.05, momentum: 0.9}
batch_size: 64
epochs: 15
max_steps: $2
target_accuracy: $3
workers: {min: 2, max: 2}
shards: 1
eval_every_steps: 100
YAML
  echo "$work/$1.yaml"
}
ctr_job() {  # name: the click model (issue 14) on the carried logs
  cat >"$work/$1.yaml" <<YAML
name: $1
model: {type: embedding_mlp, table: deep, bottom: [64, 16], top: [128, 64], interaction: dot}
dataset: {dir: $DATA/ctr}
optimizer: {type: adam, lr: 0.001}
batch_size: 512
epochs: 2
workers: {min: 2, max: 2}
shards: 1
consistency: {mode: async}
eval_every_steps: 100000000
embeddings:
  - {name: deep, dim: 16, capacity: 4000000, optimizer: {type: adam, lr: 0.01}}
YAML
  echo "$work/$1.yaml"
}
field() { grep -o "\"$1\": [^,]*" "$2" | head -1 | sed -E 's/.*: "?([^"]*)"?/\1/'; }
rate() {  # samples trained / (end - start) of a job's JSON
  awk -v n="$(field samples_total "$1")" -v a="$(field start_time_unix "$1")" \
    -v b="$(field end_time_unix "$1")" 'BEGIN { if (b > a) printf "%.0f", n / (b - a); else print "?" }'
}
train() {  # device tag job.yaml; sets JSON
  JSON=$work/$2.json
  cluster "$1" "$2"
  local id
  id=$(run fulcrumctl --coordinator="$COORD" submit "$3" | head -1)
  timeout 240 "$D/lib/ld-linux-x86-64.so.2" --library-path "$D/lib" "$D/bin/fulcrumctl" \
    --coordinator="$COORD" status "$id" --watch >"$work/watch-$2.log" 2>&1
  run fulcrumctl --coordinator="$COORD" status "$id" --json >"$JSON" 2>/dev/null
  cleanup; pids=()
}
if [ "$gpu" != none ]; then
  train cuda:0 cuda0 "$(job job-cuda0 0 0.88)"; gj=$JSON
  echo "GPU job: $(field state "$gj") $(field message "$gj")"
fi
train cpu cpu "$(job job-cpu 600 0)"; cj=$JSON
# The click model (issue 14), where its logs were carried (--prepare DIR
# CTR_DIR): the same job on the GPU and on the CPU.
ctr=none
if [ -f "$(dirname "$DATA")/ctr.tar.xz" ]; then
  mkdir -p "$DATA/ctr" && tar -C "$DATA/ctr" -xJf "$(dirname "$DATA")/ctr.tar.xz" && ctr=yes
fi
if [ "$ctr" = yes ]; then
  if [ "$gpu" != none ]; then
    train cuda:0 ctr-cuda0 "$(ctr_job ctr-cuda0)"; gcj=$JSON
  fi
  train cpu ctr-cpu "$(ctr_job ctr-cpu)"; ccj=$JSON
fi

# 3. Per-step time, Fulcrum vs PyTorch on the same GPU.
bench=$work/bench.txt
: >"$bench"
if [ "$gpu" != none ]; then
  run gpu_step --device cuda:0 >>"$bench" 2>&1
  run gpu_step --device cuda:0 --tf32 >>"$bench" 2>&1
  python3 "$D/bench/torch_gpu_step.py" >>"$bench" 2>&1
  python3 "$D/bench/torch_gpu_step.py" --tf32 >>"$bench" 2>&1
fi
run gpu_step --device cpu --steps 50 >>"$bench" 2>&1

echo
echo "==================== GPU check summary ===================="
printf "%-34s %s\n" "GPU" "$gpu"
printf "%-34s %s\n" "cuda_backend_test" "exit $tests_rc: $tests, $skipped skipped"
if [ "$gpu" != none ]; then
  printf "%-34s %s\n" "2 workers on one GPU" "$(field state "$gj"): $(field message "$gj")"
  printf "%-34s %s ms\n" "step compute, GPU worker" "$(field step_compute_ms "$gj")"
  printf "%-34s %s ms\n" "step wait, GPU worker" "$(field step_wait_ms "$gj")"
  printf "%-34s %s\n" "overlap (comm hidden by compute)" "$(field overlap "$gj")"
  printf "%-34s %s\n" "samples/s (job, GPU, incl. evals)" "$(rate "$gj")"
fi
printf "%-34s %s ms\n" "step compute, CPU worker" "$(field step_compute_ms "$cj")"
printf "%-34s %s\n" "samples/s (job, CPU, 600 steps)" "$(rate "$cj")"
if [ "$ctr" = yes ]; then
  echo "click model (embedding_mlp with dot interaction, 2 workers, 1 shard, batch 512, 2 epochs; planted AUC $(awk '/planted_auc/ {print $2}' "$DATA/ctr/planted.txt")):"
  for j in ${gcj:-} $ccj; do
    printf "  %-32s %s, AUC %s, %s samples/s, compute %s ms, wait %s ms\n" "$(basename "$j" .json)" \
      "$(field state "$j")" "$(field test_accuracy "$j")" "$(rate "$j")" \
      "$(field step_compute_ms "$j")" "$(field step_wait_ms "$j")"
  done
fi
echo "per-step time (forward+backward, batch 64):"
sed 's/^/  /' "$bench"
echo "logs: $work"
