#!/usr/bin/env bash
# flashinfer 0.7.2.post1 on the GPU machine, one device call (~8 min fresh: JIT FA2 ~40 s + FA3 ~90 s):
# the gpu_check matrix under run ids <name>-072, each compared with the same run made on 0.6.7.post3
# (carried in under runs/: paged, ragged, paged-fa3, ragged-fa3; a compare whose run is absent is
# skipped) with its plan differences, and paged-072 against the old version's baseline.
#   bash scripts/pack-device-wheels.sh 0.7.2.post1      # here, once: fills .whl-next/
#   (device, carrying .whl-next and runs) bash scripts/gpu_next.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export DETRUN_WHL=.whl-next DETRUN_GPU_BUDGET_S=${DETRUN_GPU_BUDGET_S:-420}
source scripts/device_setup.sh
prepare_gpu
ISO=(--set "isolation.cell_timeout_s=${DETRUN_CELL_TIMEOUT_S:-60}")
submit paged-072 jobs/paged.yaml
submit ragged-072 jobs/ragged.yaml
submit paged-fa3-072 jobs/paged.yaml --set name=paged-fa3 --set flashinfer.backend=fa3
submit ragged-fa3-072 jobs/ragged.yaml --set name=ragged-fa3 --set flashinfer.backend=fa3 --set flashinfer.ragged_backend=fa3
# The known-bug gates are version-aware: from 0.7.2 block_valid_mask covers padded CUDA-graph CTAs
# (PADDED_CTA_FIX) and the fixed_split_size hang was seen on <= 0.6.7.post3 only, so these graph cells run
# in their shard here; the cell watchdog ends one that hangs.
submit paged-nosplit-072 jobs/paged.yaml --set name=paged-nosplit --set flashinfer.disable_split_kv=true "${ISO[@]}"
submit paged-fixed-072 jobs/paged.yaml --set name=paged-fixed --set flashinfer.fixed_split_size=256 "${ISO[@]}"
for run in paged ragged paged-fa3 ragged-fa3; do
  compare "$run" "$run-072"
  [[ -d runs/$run && -d runs/$run-072 ]] && python3 scripts/plan_diff.py "$run" "$run-072" --runs-root runs
done
compare paged-072 paged-nosplit-072
compare paged-072 paged-fixed-072
if [[ -d runs/paged && -d runs/paged-072 ]]; then
  [[ -d runs/baselines/paged ]] || python3 -m detrun.cli baseline set paged --runs-root runs
  compare paged-072 --baseline   # no baseline of 0.7.2.post1's fingerprint: the 0.6.7.post3 one, provisional
fi
stop_ray
tar czf "$OUT/runs-rows-072.tgz" runs/*-072/manifest.json runs/*-072/rows runs/*-072/timings 2>/dev/null
echo "== total $(elapsed) s"
