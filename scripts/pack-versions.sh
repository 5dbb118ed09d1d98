#!/usr/bin/env bash
# Fills .whl-versions/ (git-ignored, ~21 MB) with what scripts/gpu_versions.sh needs beyond .whl/: flashinfer
# 0.7.2.post1's stripped tree and its tvm-ffi (taken from .whl-next/, which pack-device-wheels.sh 0.7.2.post1
# fills), and virtualenv with its dependencies (Ray's runtime_env `pip` builds each environment's virtualenv with
# `python -m virtualenv`). .whl/ (~41 MB) + .whl-versions/ travel together under the 64 MiB a device call carries.
#   bash scripts/pack-device-wheels.sh && bash scripts/pack-device-wheels.sh 0.7.2.post1 && bash scripts/pack-versions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl-versions
[[ -f .whl-next/flashinfer.tar.xz ]] || { echo "pack-versions.sh: run scripts/pack-device-wheels.sh 0.7.2.post1 first" >&2; exit 2; }
mkdir -p "$dest"
cp .whl-next/flashinfer.tar.xz .whl-next/apache_tvm_ffi-0.1.15.post2-*.whl "$dest"/
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 -d "$dest" virtualenv
du -sh "$dest"; ls -la "$dest"
total=$(( $(du -sm .whl | cut -f1) + $(du -sm "$dest" | cut -f1) ))
if (( total > 63 )); then echo "pack-versions.sh: .whl and $dest are $total MiB together, over 63 MiB" >&2; exit 1; fi
