#!/usr/bin/env bash
# Fills the git-ignored .whl/ with what the GPU machine lacks: flashinfer 0.6.7.post3, apache-tvm-ffi,
# a stripped Ray 2.60 (../shared/device/pack-wheels.sh) and pydantic (not in the GPU image).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/device/pack-wheels.sh .whl
for p in pydantic==2.13.4 pydantic_core==2.46.4 annotated-types typing-inspection; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$p"
done
du -sh .whl
