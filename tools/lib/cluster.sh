# Shared by tools/demo.sh and bench/*.sh: build the binaries and run a local
# cluster (every process on 127.0.0.1, kernel-picked ports). Source it, then:
#   cluster_build                       # setup.sh + bazel build; sets $bin
#   cluster_start DIR SHARDS            # coordinator + shards; sets $coord
#   cluster_add_worker DIR NAME [FLAG...]
#   cluster_build_torch                 # + libfulcrum.so for fulcrum.torch
#   cluster_add_torch_worker DIR NAME SCRIPT [ARG...]  # a PyTorch worker
#   cluster_wait_members N              # until N workers+shards registered
#   ctl ARGS...                         # fulcrumctl against the cluster
#   cluster_job_yaml FILE STEPS W S [MAX] # the benchmarks' reference job
#   cluster_timed_job DIR STEPS W S     # runs it; prints "seconds test_accuracy"
#   cluster_stop                        # also installed as the EXIT trap
#   cluster_targets FILE                # Prometheus file_sd JSON of every
#                                       # process's /metrics endpoint
# cluster_job_extra (string): YAML lines added to cluster_job_yaml's job.
# cluster_flags (array) is passed to every process and fulcrumctl (e.g. the
# TLS files), cluster_ctl_flags to fulcrumctl only (e.g. --token_file),
# cluster_coordinator_flags to the coordinator only (e.g. --data_root),
# cluster_shard_flags to the shards only. cluster_host is the address the
# coordinator and shards listen on (127.0.0.1; another one needs --insecure
# or TLS in their flags); cluster_worker_prefix runs each fulcrum-worker
# (e.g. in another network namespace: tools/lib/link.sh).
cluster_pids=()
cluster_flags=()
cluster_ctl_flags=()
cluster_coordinator_flags=()
cluster_shard_flags=()
cluster_host=127.0.0.1
cluster_worker_prefix=()

cluster_build() {
  bash tools/setup.sh
  bazel build --noshow_progress //server/coordinator:fulcrum-coordinator \
    //server/ps:fulcrum-server //worker:fulcrum-worker //client:fulcrumctl
  bin=$(bazel info bazel-bin 2>/dev/null)
  bazel shutdown
}

cluster_stop() {
  trap - EXIT
  [ ${#cluster_pids[@]} -gt 0 ] || return 0
  kill "${cluster_pids[@]}" 2>/dev/null || true
  for _ in $(seq 50); do
    local alive=0 p
    for p in "${cluster_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  kill -9 "${cluster_pids[@]}" 2>/dev/null || true
  cluster_pids=()
}

cluster_start() {
  local dir=$1 shards=$2 i ckpt
  trap cluster_stop EXIT
  rm -rf "$dir"; mkdir -p "$dir"
  ckpt="$(cd "$dir" && pwd)/checkpoints"  # the roots must be absolute
  "$bin/server/coordinator/fulcrum-coordinator" --listen="$cluster_host:0" \
    --port_file="$dir/coordinator.port" --heartbeat_ms=200 \
    --state_dir="$dir/coordinator-state" --checkpoint_root="$ckpt" \
    --metrics_port_file="$dir/coordinator.metrics_port" "${cluster_flags[@]}" \
    "${cluster_coordinator_flags[@]}" 2>"$dir/coordinator.log" &
  cluster_pids+=($!)
  for _ in $(seq 100); do [ -s "$dir/coordinator.port" ] && break; sleep 0.1; done
  if [ ! -s "$dir/coordinator.port" ]; then
    echo "coordinator did not start (see $dir/coordinator.log)" >&2
    return 1
  fi
  coord=$cluster_host:$(cat "$dir/coordinator.port")
  for i in $(seq "$shards"); do
    "$bin/server/ps/fulcrum-server" --listen="$cluster_host:0" --coordinator="$coord" \
      --checkpoint_root="$ckpt" \
      --metrics_port_file="$dir/shard-$i.metrics_port" "${cluster_flags[@]}" \
      "${cluster_shard_flags[@]}" \
      2>"$dir/shard-$i.log" &
    cluster_pids+=($!)
  done
}

cluster_add_worker() {
  local dir=$1 name=$2
  shift 2
  "${cluster_worker_prefix[@]}" "$bin/worker/fulcrum-worker" --coordinator="$coord" \
    --metrics_port_file="$dir/$name.metrics_port" "${cluster_flags[@]}" "$@" \
    2>"$dir/$name.log" &
  cluster_pids+=($!)
}

cluster_build_torch() {
  bazel build --noshow_progress //worker/capi:libfulcrum.so
  bazel shutdown
}

# A PyTorch script with fulcrum (client/python) and the examples importable,
# on the libfulcrum.so cluster_build_torch built. Its output goes to
# DIR/NAME.log.
cluster_add_torch_worker() {
  local dir=$1 name=$2 script=$3
  shift 3
  PYTHONPATH="$PWD/client/python:$PWD/examples/torch" \
    FULCRUM_LIB="$bin/worker/capi/libfulcrum.so" PYTHONUNBUFFERED=1 \
    /usr/bin/python3 "$script" --coordinator="$coord" "$@" >"$dir/$name.log" 2>&1 &
  cluster_pids+=($!)
}

ctl() {
  "$bin/client/fulcrumctl" --coordinator="$coord" "${cluster_flags[@]}" \
    "${cluster_ctl_flags[@]}" "$@"
}

# The benchmarks' reference job, written to FILE: MLP 784-256-128-10 on
# Fashion-MNIST, batch 64 per worker, momentum SGD, W workers (up to MAX,
# default W) and S shards, STEPS steps, evaluated at the end only.
cluster_job_yaml() {
  cat > "$1" <<YAML
name: bench
model: {type: mlp, layers: [784, 256, 128, 10]}
dataset: {format: idx, dir: /usr/share/datasets/fashion-mnist}
optimizer: {type: momentum, lr: 0.05, momentum: 0.9}
batch_size: 64
epochs: 100
workers: {min: $3, max: ${5:-$3}}
shards: $4
seed: 1
eval_every_steps: 1000000
max_steps: $2
${cluster_job_extra:-}
YAML
}

# Runs the reference job (cluster_job_yaml) for STEPS steps; prints its
# training seconds (coordinator clock) and test accuracy.
cluster_timed_job() {
  local dir=$1 steps=$2 workers=$3 shards=$4 id
  cluster_job_yaml "$dir/job.yaml" "$steps" "$workers" "$shards"
  id=$(ctl submit "$dir/job.yaml")
  ctl status "$id" --watch >/dev/null
  ctl status "$id" --json | /usr/bin/python3 -c \
    'import json,sys; j=json.load(sys.stdin); print(j["end_time_unix"]-j["start_time_unix"], j["progress"]["test_accuracy"])'
}

cluster_wait_members() {
  local want=$1 n
  for _ in $(seq 100); do
    n=$(ctl members 2>/dev/null | tail -n +2 | wc -l || true)
    [ "$n" -ge "$want" ] && return 0
    sleep 0.1
  done
  echo "only $n of $want members registered" >&2
  return 1
}

cluster_targets() {
  local dir out=$1 f name role first=1
  dir=$(dirname "$(ls "$run"/*.metrics_port | head -1)")
  {
    echo "["
    for f in "$dir"/*.metrics_port; do
      name=$(basename "$f" .metrics_port)
      case $name in coordinator) role=coordinator ;; shard-*) role=server ;; *) role=worker ;; esac
      [ $first -eq 1 ] || echo ","
      first=0
      printf '  {"targets": ["127.0.0.1:%s"], "labels": {"role": "%s", "process": "%s"}}' \
        "$(cat "$f")" "$role" "$name"
    done
    echo
    echo "]"
  } > "$out.tmp" && mv "$out.tmp" "$out"
}
