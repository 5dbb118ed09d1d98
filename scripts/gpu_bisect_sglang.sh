#!/usr/bin/env bash
# detrun bisect across SGLang releases on SGLang's OWN FlashInferAttnBackend, on the H200 (issue 31):
# jobs/sglang-releases.yaml (prefill, SGLANG_FLASHINFER_USE_PAGED off, `mode: bitwise` claimed) over 0.5.14, 0.5.15,
# 0.5.23, each release in a process of its own with its tree first on sys.path (scripts/sglang_release_bisect.py;
# no Ray: the machine has one Python environment, 0.5.23's dependencies). Expected (the wiring, docs/sglang-
# releases.md; the same bisect on CPU with fake wrappers: tests/test_bisect_sglang_releases.py): 0.5.14 holds (no
# plain-EXTEND graph: its cudagraph prefill runs eager, the ragged FA3 wrapper, as eager), 0.5.23 and 0.5.15 break
# (the full prefill graph: paged FA2 whatever the flag): exit 1, last held 0.5.14, first broke 0.5.15, what
# changed (path ragged vs paged, wiring.graph None vs full-prefill, kernels) and $OUT/bisected.yaml.
# FlashInfer 0.7.2.post1 (.whl-next) for every release: installed with --no-deps, 0.5.14/0.5.15 pin 0.6.12 (not
# carried). sgl_kernel is detrun's import stub (as scripts/gpu_sglang_own.sh); 0.5.14/0.5.15 register
# transformers' "qwen3_asr" with exist_ok (tests/sglang_release_run.py).
#   (here)   bash scripts/pack-device-wheels.sh 0.7.2.post1 && bash scripts/pack-sglang.sh &&
#            bash scripts/pack-sglang.sh --trees 0.5.14 0.5.15
#   (device) bash scripts/gpu_bisect_sglang.sh     carry .whl-next (43.1 MiB), .whl-sglang (11.5 MiB) and
#            .whl-sglang-releases (7.5 MiB): 62.1 MiB of the 64 MiB a call carries
# Time (estimated, not measured): ~20-30 s per SGLang import, x3 processes; the FA3 ragged and FA2 paged JIT on a
# fresh machine ~2 min (warmed first, cached on disk for the three processes); about 4 minutes in all.
set -uo pipefail
cd "$(dirname "$0")/.."
export DETRUN_SGLANG=1 DETRUN_WHL=${DETRUN_WHL:-.whl-next} DETRUN_GPU_BUDGET_S=${DETRUN_GPU_BUDGET_S:-240}
source scripts/device_setup.sh
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
python3 -c "import flashinfer, torch; print('flashinfer', flashinfer.__version__, 'torch', torch.__version__)"
# each release's tree in a folder of its own (0.5.23: the one .whl-sglang carries)
args=()
for v in 0.5.14 0.5.15 0.5.23; do
  tarball=.whl-sglang-releases/sglang-$v-tree.tar.xz
  [[ $v == 0.5.23 ]] && tarball=.whl-sglang/sglang-tree.tar.xz
  mkdir -p "/tmp/sglang-$v" && tar -C "/tmp/sglang-$v" -xJf "$tarball" || { echo "== no tree for $v" >&2; exit 2; }
  args+=(--tree "$v=/tmp/sglang-$v")
done
DETRUN_JIT_BACKENDS="fa2 fa3" python3 scripts/jit_warmup.py jobs/sglang-releases.yaml || echo "== JIT warm-up FAILED"
echo "== JIT done at $(elapsed) s"
s=$(date +%s)
python3 scripts/sglang_release_bisect.py jobs/sglang-releases.yaml "${args[@]}" --runs-root runs \
  -o "$OUT/bisected.yaml" --format json > "$OUT/bisect.json"
code=$?
cat "$OUT/bisect.json"
echo "== bisect exit $code (expected 1: last held sglang==0.5.14, first broke sglang==0.5.15) in $(( $(date +%s) - s )) s"
for run in runs/sglang-releases-sglang-*; do
  [[ -d $run ]] && python3 -m detrun.cli compare "$(basename "$run")" --runs-root runs | tail -3
done
tar czf "$OUT/runs-bisect-sglang.tgz" runs/sglang-releases-*/manifest.json runs/sglang-releases-*/rows 2>/dev/null
echo "== total $(elapsed) s"
