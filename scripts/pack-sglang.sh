#!/usr/bin/env bash
# Fills the git-ignored .whl-sglang/ with what the offline GPU machine (Python 3.12, torch 2.11+cu130, no
# network) lacks to import SGLang's own FlashInfer attention backend (backend: sglang):
#   bash scripts/pack-sglang.sh [VERSION]     # default 0.5.23
# - sglang-tree.tar.xz: the release's pure-Python tree and its dist-info (the version detrun checks), without
#   its compiled extensions (*.so: the Rust server/grpc/multimodal/mem-cache modules, not on the attention
#   path) and without multimodal_gen/;
# - the pure-Python or cp312 wheels of the packages SGLang's import of the attention backend and its test kit
#   needs beyond the GPU image (requirements/sglang-device.txt);
# - sgl_kernel is NOT packed (sglang-kernel is a 373 MB wheel built for torch 2.14.1): scripts/device_setup.sh
#   puts detrun's import stub (tests/sglang_stubs/) on the path there, and every result says so.
# scripts/device_setup.sh installs it when DETRUN_SGLANG=1.
set -euo pipefail
cd "$(dirname "$0")/.."
# Other releases' trees alone (scripts/gpu_bisect_sglang.sh bisects across them; about 3.6-3.9 MB each):
#   bash scripts/pack-sglang.sh --trees 0.5.14 0.5.15     # -> .whl-sglang-releases/sglang-VERSION-tree.tar.xz
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tree() {  # tree VERSION OUT: the release's stripped tree (no *.so, no multimodal_gen/) as OUT (.tar.xz)
  [[ -f $2 ]] && return
  rm -rf "$tmp/tree" "$tmp"/sglang-*.whl
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" "sglang==$1"
  (cd "$tmp" && python3 -m zipfile -e sglang-*.whl tree >/dev/null)
  find "$tmp/tree" -name '*.so' -delete
  rm -rf "$tmp/tree/sglang/multimodal_gen"
  XZ_OPT=-9e tar -C "$tmp/tree" -cJf "$2" .
}
exclude() { grep -qx "/$1/" .git/info/exclude 2>/dev/null || echo "/$1/" >> .git/info/exclude; }
if [[ ${1:-} == --trees ]]; then
  dest=.whl-sglang-releases
  exclude "$dest"
  mkdir -p "$dest"
  for v in "${@:2}"; do tree "$v" "$dest/sglang-$v-tree.tar.xz"; done
  du -sh "$dest"; ls -la "$dest"
  exit 0
fi
version=${1:-0.5.23}
dest=.whl-sglang
exclude "$dest"
mkdir -p "$dest"
tree "$version" "$dest/sglang-tree.tar.xz"
grep -v '^#' requirements/sglang-device.txt | grep . | while read -r p; do
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$dest" "$p"
done
du -sh "$dest"; ls -la "$dest"
