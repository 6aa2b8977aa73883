#!/usr/bin/env bash
# Builds the Python package fulcrum (fulcrum.torch + libfulcrum.so) as a wheel
# in dist/, and optionally installs it for Debian's /usr/bin/python3.
#
#   tools/build_wheel.sh              # dist/fulcrum-0.1.0-py3-none-linux_x86_64.whl
#   tools/build_wheel.sh --install    # + unpack it into /usr/local/lib/python3.11/dist-packages
#   tools/build_wheel.sh --install --target DIR   # + unpack it into DIR (then PYTHONPATH=DIR)
#
# Debian 12's Python is externally managed (pip refuses system installs);
# --install unpacks the wheel where Debian keeps locally installed modules,
# no pip involved. In a virtual environment (python3 -m venv
# --system-site-packages, to see Debian's python3-torch) pip installs the wheel:
# VENV/bin/pip install --no-index dist/fulcrum-*.whl. The library links
# Debian 12's gRPC/Protobuf/Abseil packages (tools/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
install=0
target=""
while [ $# -gt 0 ]; do
  case "$1" in
    --install) install=1; shift ;;
    --target) target=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build_wheel: unknown argument $1" >&2; exit 2 ;;
  esac
done
bash tools/setup.sh
bazel build --noshow_progress //client/python:wheel
bin=$(bazel info bazel-bin 2>/dev/null)
bazel shutdown
mkdir -p dist
wheel=$(ls "$bin"/client/python/fulcrum-*.whl)
install -m 644 "$wheel" dist/
wheel=dist/$(basename "$wheel")
echo "build_wheel: $wheel"
[ $install -eq 1 ] || exit 0
if [ -z "$target" ]; then
  target=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("platlib", "posix_local"))' 2>/dev/null \
    || /usr/bin/python3 -c 'import sys; print(f"/usr/local/lib/python3.{sys.version_info[1]}/dist-packages")')
fi
sudo=""
if [ ! -w "$(dirname "$target")" ] && [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
$sudo mkdir -p "$target"
$sudo rm -rf "$target/fulcrum" "$target"/fulcrum-*.dist-info
$sudo /usr/bin/python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$wheel" "$target"
$sudo chmod 755 "$target/fulcrum/libfulcrum.so"
echo "build_wheel: installed into $target"
cd /
PYTHONPATH="$target" /usr/bin/python3 -c 'import fulcrum; print(f"build_wheel: import fulcrum works (C API version {fulcrum.api_version()})")'
