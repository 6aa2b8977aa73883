#!/usr/bin/env bash
# Builds Fulcrum's container images with podman (deploy/containers/Containerfile):
#   fulcrum:TAG      coordinator, parameter server, CPU worker, fulcrumctl
#   fulcrum-gpu:TAG  the same plus the CUDA backend (--gpu; needs /usr/local/cuda here)
#   fulcrum-torch:TAG the CPU image plus PyTorch workers (--torch: Debian's
#                    python3-torch, the fulcrum package, examples/torch)
#
#   tools/build_image.sh [--gpu] [--torch] [--tag TAG] [--base IMAGE] [--save FILE.tar]
#
# The binaries are built here with Bazel against Debian 12's libraries, so the
# base must be Debian 12 (bookworm). --base defaults to debian:bookworm-slim
# from a registry; where no registry can be reached (an offline machine) a
# minimal bookworm base is made with mmdebstrap from this machine's apt
# sources and imported as localhost/debian:bookworm-minbase.
set -euo pipefail
cd "$(dirname "$0")/.."

gpu=0
torch=0
tag=$(git describe --always --dirty 2>/dev/null || echo dev)
base=""
save=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpu=1; shift ;;
    --torch) torch=1; shift ;;
    --tag) tag=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --save) save=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build_image: unknown argument $1" >&2; exit 2 ;;
  esac
done

bash tools/setup.sh
missing=""
for p in podman mmdebstrap; do command -v $p >/dev/null || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "build_image: installing$missing"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi

targets="//server/coordinator:fulcrum-coordinator //server/ps:fulcrum-server
  //worker:fulcrum-worker //client:fulcrumctl"
[ $gpu = 1 ] && targets="$targets //worker/backend:libfulcrum_cuda.so"
bazel build --noshow_progress $targets
bin=$(bazel info bazel-bin 2>/dev/null)
bazel shutdown

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/cuda" "$ctx/examples" "$ctx/python" "$ctx/torch-examples"
if [ $torch = 1 ]; then  # the package with libfulcrum.so, as the wheel installs it
  bash tools/build_wheel.sh --install --target "$ctx/python" >/dev/null
  cp examples/torch/*.py examples/torch/*.yaml "$ctx/torch-examples/"
fi
cp "$bin/server/coordinator/fulcrum-coordinator" "$bin/server/ps/fulcrum-server" \
   "$bin/worker/fulcrum-worker" "$bin/client/fulcrumctl" "$ctx/bin/"
cp examples/*.yaml "$ctx/examples/"
chmod 755 "$ctx"/bin/*
if [ $gpu = 1 ]; then
  plugin="$bin/worker/backend/libfulcrum_cuda.so"
  [ -f "$plugin" ] || { echo "build_image: no CUDA plugin (no CUDA toolkit here?)" >&2; exit 1; }
  cp "$plugin" "$ctx/cuda/"
  # The CUDA runtime and cuBLAS the plugin loads (not the driver: the node's
  # NVIDIA container runtime mounts libcuda.so).
  cuda=${CUDA_PATH:-/usr/local/cuda}
  for lib in libcudart.so libcublas.so libcublasLt.so; do
    cp -L "$cuda"/lib64/$lib.[0-9]* "$ctx/cuda/" 2>/dev/null ||
      cp -L "$cuda"/targets/x86_64-linux/lib/$lib.[0-9]* "$ctx/cuda/"
  done
  rm -f "$ctx"/cuda/*.so.*.*  # keep the soname files only
fi

if [ -z "$base" ]; then
  base=docker.io/library/debian:bookworm-slim
  if ! podman image exists "$base" && ! timeout 60 podman pull -q "$base" >/dev/null 2>&1; then
    base=localhost/debian:bookworm-minbase
    if ! podman image exists "$base"; then
      echo "build_image: no registry; making a bookworm base with mmdebstrap"
      mmdebstrap --variant=minbase bookworm "$ctx/base.tar" >/dev/null 2>&1
      podman import -q "$ctx/base.tar" "$base" >/dev/null
      rm -f "$ctx/base.tar"
    fi
  fi
fi

build() {  # target name
  echo "build_image: building $2:$tag (target $1, base $base)"
  podman build -q --isolation chroot --build-arg BASE="$base" --target "$1" \
    -f deploy/containers/Containerfile -t "localhost/$2:$tag" -t "localhost/$2:latest" "$ctx" >/dev/null
}
build cpu fulcrum
images="localhost/fulcrum:$tag"
if [ $gpu = 1 ]; then
  build gpu fulcrum-gpu
  images="$images localhost/fulcrum-gpu:$tag"
fi
if [ $torch = 1 ]; then
  build torch fulcrum-torch
  images="$images localhost/fulcrum-torch:$tag"
fi
if [ -n "$save" ]; then
  podman save -q -o "$save" $images
  echo "build_image: saved $images to $save"
fi
echo "build_image: built $images"
