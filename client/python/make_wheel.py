"""Packs fulcrum (this folder's package) and libfulcrum.so into a wheel.

    make_wheel.py --lib libfulcrum.so --out fulcrum-V-py3-none-linux_ARCH.whl PKG_FILES...

A wheel is a zip with a dist-info folder (PEP 427); nothing here needs
setuptools or network access. The library links Debian 12's gRPC, Protobuf
and Abseil dynamically, so the wheel installs on Debian 12 (the tag says
linux, not manylinux).
"""

import argparse
import base64
import hashlib
import os
import re
import zipfile

p = argparse.ArgumentParser()
p.add_argument("--lib", required=True)
p.add_argument("--out", required=True)
p.add_argument("files", nargs="+", help="the package's .py files")
args = p.parse_args()

init = next(f for f in args.files if os.path.basename(f) == "__init__.py")
version = re.search(r'__version__ = "([^"]+)"', open(init).read()).group(1)
tag = os.path.basename(args.out).split("-", 2)[2].rsplit(".", 1)[0]
info = f"fulcrum-{version}.dist-info"
records = []


def add(z, name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    records.append(f"{name},sha256={digest.decode()},{len(data)}")
    entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # reproducible
    entry.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
    z.writestr(entry, data, zipfile.ZIP_DEFLATED)


with zipfile.ZipFile(args.out, "w") as z:
    for f in sorted(args.files):
        add(z, f"fulcrum/{os.path.basename(f)}", open(f, "rb").read())
    add(z, "fulcrum/libfulcrum.so", open(args.lib, "rb").read())
    add(z, f"{info}/METADATA", (
        "Metadata-Version: 2.1\nName: fulcrum\n"
        f"Version: {version}\n"
        "Summary: Fulcrum workers from PyTorch: fulcrum.torch over libfulcrum\n"
        "Requires-Python: >=3.9\n").encode())
    add(z, f"{info}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: fulcrum make_wheel.py\n"
        f"Root-Is-Purelib: false\nTag: {tag}\n").encode())
    name = f"{info}/RECORD"
    body = "\n".join(records + [f"{name},,"]) + "\n"
    entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    entry.external_attr = 0o644 << 16
    z.writestr(entry, body, zipfile.ZIP_DEFLATED)
