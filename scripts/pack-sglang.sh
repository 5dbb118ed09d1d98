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
version=${1:-0.5.23}
dest=.whl-sglang
grep -qx '/.whl-sglang/' .git/info/exclude 2>/dev/null || echo '/.whl-sglang/' >> .git/info/exclude
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ ! -f $dest/sglang-tree.tar.xz ]]; then
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" "sglang==$version"
  (cd "$tmp" && python3 -m zipfile -e sglang-*.whl tree >/dev/null)
  find "$tmp/tree" -name '*.so' -delete
  rm -rf "$tmp/tree/sglang/multimodal_gen"
  XZ_OPT=-9e tar -C "$tmp/tree" -cJf "$dest/sglang-tree.tar.xz" .
fi
grep -v '^#' requirements/sglang-device.txt | grep . | while read -r p; do
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$dest" "$p"
done
du -sh "$dest"; ls -la "$dest"
