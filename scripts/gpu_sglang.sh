#!/usr/bin/env bash
# SGLang 0.5.10's two FlashInfer configurations on the GPU (issue: "Test what SGLang actually runs"): each
# profile's job (prefill and decode, eager and CUDA graph), its known-bug graph cells run in isolated
# workers (one sample per bug), then which claims hold per axis (--strict: every axis bitwise) and the two
# profiles against each other. Then the pinned version's matrix runs that gpu_next.sh compares against.
#   (device) bash scripts/gpu_sglang.sh        DETRUN_GPU_ONLY="sg-default sg-det ...": only those runs
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_setup.sh
start_ray
# The modules gpu_scale.sh compiled (its runs roots' JIT caches), restored by these tasks too.
for d in runs-jit-*/jit-cache; do [[ -d $d ]] && mkdir -p runs/jit-cache && cp -rn "$d"/. runs/jit-cache/; done
ISO=(--set isolation.known_bugs=run --set isolation.samples=1 --set "isolation.cell_timeout_s=${DETRUN_CELL_TIMEOUT_S:-60}")
submit sg-default jobs/sglang-default.yaml
submit sg-det jobs/sglang-deterministic.yaml "${ISO[@]}"
submit decode jobs/decode.yaml
for run in sg-default sg-det decode; do
  compare "$run" --strict      # which claims hold: every axis bitwise, each axis' status and cause
done
compare sg-default sg-det       # the two profiles, same requests: the run axis names what differs
compare sg-det --expect phase=bitwise
# The pinned version's matrix for scripts/gpu_next.sh (cross-version compare) and its baseline.
submit paged jobs/paged.yaml
submit ragged jobs/ragged.yaml
submit paged-fa3 jobs/paged.yaml --set name=paged-fa3 --set flashinfer.backend=fa3
submit ragged-fa3 jobs/ragged.yaml --set name=ragged-fa3 --set flashinfer.backend=fa3 --set flashinfer.ragged_backend=fa3
[[ -d runs/paged ]] && python3 -m detrun.cli baseline set paged --runs-root runs
stop_ray
tar czf "$OUT/runs-sglang.tgz" runs/*/manifest.json runs/*/rows runs/*/timings 2>/dev/null
echo "== total $(elapsed) s"
