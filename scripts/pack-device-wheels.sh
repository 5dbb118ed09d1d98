#!/usr/bin/env bash
# Fills a git-ignored folder with what the offline GPU machine (Python 3.12, torch 2.11+cu130, nvcc 13.0)
# lacks, small enough to travel with the working tree (64 MiB per call in all):
#   bash scripts/pack-device-wheels.sh               # .whl/: flashinfer 0.6.7.post3 (its wheel), tvm-ffi 0.1.9
#   bash scripts/pack-device-wheels.sh 0.7.2.post1   # .whl-next/: flashinfer 0.7.2.post1 stripped, tvm-ffi 0.1.15.post2
# Both add a stripped Ray 2.60 (ray-core.tar.xz), pydantic and cupti-python (the audit's tracer where it loads,
# DETRUN_KERNEL_TRACER=auto; bench/cupti_start.py); scripts/device_setup.sh installs from DETRUN_WHL (default
# .whl). NVCC=/path/to/nvcc also scans every header the stripped tree's JIT includes.
#
# 0.7.2.post1's wheel is 62 MB (427 MB unpacked, ships no prebuilt cubins), so it travels as
# flashinfer.tar.xz with what the FA2/FA3 batch prefill, batch decode and cascade (merge_state) JIT
# does not read left out (docs/flashinfer-versions.md): data/csrc's subfolders (the other kernels'
# sources: MoE, GDN, KDA, MLA, xqa, fmha_v2, trtllm, sampling, ...; the top-level csrc files stay),
# the .cu/.cuh/.c/.h kernel sources inside the Python package outside data/ (experimental/, fused_moe/,
# ...; every .py stays), cutlass's examples/python/test/docs and tools other than util/include,
# cccl's benchmarks/ci/docs/python/cudax and libcudacxx's codegen/share/test. Kept whole: data/include,
# cutlass/include, cutlass/tools/util/include, cccl cub/thrust/libcudacxx include (the JIT puts
# flashinfer's own cccl before the toolkit's), spdlog. Its other declared dependencies (cuda-python,
# cuda-tile, nvidia-cutlass-dsl, cudnn-frontend, nccl4py, nccl-extensions) are not needed to import it
# or to build these modules, and are not packed; numpy, tqdm, requests, nvidia-ml-py come with the image.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-0.6.7.post3}
case $version in
  0.6.7.post3) dest=.whl tvm=0.1.9 ;;
  0.7.2.post1) dest=.whl-next tvm=0.1.15.post2 ;;
  *) echo "pack-device-wheels.sh: flashinfer $version: expected 0.6.7.post3 or 0.7.2.post1" >&2; exit 2 ;;
esac
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
download() { python3 -m pip download -q --no-deps "${plat[@]}" -d "$dest" "$@"; }
mkdir -p "$dest"
for p in "apache-tvm-ffi==$tvm" jsonschema jsonschema-specifications referencing rpds-py \
         pydantic==2.13.4 pydantic_core==2.46.4 annotated-types typing-inspection \
         cupti-python==13.0.1; do
  download "$p"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Ray's wheel is 79 MB; without its Java jars and the libraries detrun does not use it packs to about a third.
if [[ ! -f $dest/ray-core.tar.xz ]]; then
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" ray==2.60.0
  (cd "$tmp" && python3 -m zipfile -e ray-*.whl ray-site >/dev/null)
  rm -rf "$tmp"/ray-site/ray/{jars,rllib,tune,train,serve,data,llm,air,workflow} "$tmp"/ray-site/ray/dashboard/client
  chmod +x "$tmp"/ray-site/ray/core/src/ray/gcs/gcs_server "$tmp"/ray-site/ray/core/src/ray/raylet/raylet 2>/dev/null || true
  tar -C "$tmp/ray-site" -cJf "$dest/ray-core.tar.xz" .
fi
if [[ $version == 0.6.7.post3 ]]; then
  download "flashinfer-python==$version"
elif [[ ! -f $dest/flashinfer.tar.xz ]]; then
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" "flashinfer-python==$version"
  site=$tmp/fi-site
  (cd "$tmp" && python3 -m zipfile -e flashinfer_python-*.whl fi-site >/dev/null)
  d=$site/flashinfer/data
  find "$d/csrc" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
  find "$site/flashinfer" -path "$d" -prune -o -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.c' -o -name '*.h' \) \
    -print0 | xargs -0 rm -f
  rm -rf "$d"/cutlass/{examples,python,test,docs,media} "$d"/cccl/{benchmarks,ci,docs,python,cudax} \
    "$d"/cccl/libcudacxx/{codegen,share,test}
  find "$d/cutlass/tools" -mindepth 1 -maxdepth 1 ! -name util -exec rm -rf {} +
  find "$d/cutlass/tools/util" -mindepth 1 -maxdepth 1 ! -name include -exec rm -rf {} +
  # On this machine's Python, with the tvm-ffi of the same version and tqdm/pynvml/filelock (in the GPU image):
  # the stripped tree must import and generate every source and include its JIT specs name.
  python3 -m pip install -q --no-deps --target "$tmp/check" "apache-tvm-ffi==$tvm" tqdm nvidia-ml-py filelock
  PYTHONPATH=$tmp/check python3 scripts/check_flashinfer_tree.py "$site" --version "$version" ${NVCC:+--nvcc "$NVCC"}
  XZ_OPT=-9e tar -C "$site" -cJf "$dest/flashinfer.tar.xz" .
fi
du -sh "$dest"; ls -la "$dest"
total=$(du -sm "$dest" | cut -f1)
if (( total > 60 )); then echo "pack-device-wheels.sh: $dest is $total MiB, over 60 MiB" >&2; exit 1; fi
