#!/usr/bin/env bash
# Installs every Debian package Fulcrum needs to build, test and run the demo.
# Idempotent and quiet when nothing is missing. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java     # build (offline Bazel 4.2.3)
  g++ pkg-config
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev libyaml-cpp-dev libcivetweb-dev
  libssl-dev                           # HMAC-SHA256: member credentials (OpenSSL, as gRPC)
  dataset-fashion-mnist                # the reference workload's data
  procps                               # pkill/ps in scripts
  iproute2                             # ip, tc: multi-host tests (network namespaces as hosts)
  prometheus                           # promtool and a real Prometheus for the monitoring tests
  python3-torch                        # fulcrum.torch's tests, examples and the DDP peer
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
