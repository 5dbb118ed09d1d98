#!/usr/bin/env bash
# detrun bisect on the H200 over the two packed FlashInfer versions: jobs/paged.yaml pinned to 0.6.7.post3, then
# to 0.7.2.post1, each a submit in its own Ray runtime_env (as scripts/gpu_versions.sh), each judged by its claims
# and, with --expect version=bitwise, the second beside the first. Expected from docs/gpu-results.md (issue 19:
# 168 of 168 cells the same bits): both hold, so with --no-expect-break the bisect exits 0 ("no break"); a 1
# would be a break located at 0.7.2.post1, with what changed (plan fields, kernels) and $OUT/bisected.yaml.
# Then `detrun history` over every run of the call (gpu_versions.sh's and these): the versions each run used.
# Run it AFTER scripts/gpu_versions.sh in the same device call: that builds the base site (.whl-base) and the
# wheelhouse (/tmp/wheelhouse) this uses; its runs root's JIT cache is reused (~1.5-2.5 min then: two virtualenvs
# built by Ray's pip, two runs of paged.yaml).
#   (device, carrying .whl and .whl-versions) bash scripts/gpu_versions.sh; bash scripts/gpu_bisect.sh
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -d /tmp/wheelhouse && -d .whl-base ]] || { echo "gpu_bisect.sh: run scripts/gpu_versions.sh first" >&2; exit 2; }
export DETRUN_WHL=.whl-base
source scripts/device_setup.sh
ray_python  # PY: Ray and the driver on the image virtualenv's base interpreter (device_setup.sh says why)
$PY -m ray.scripts.scripts start --head --num-gpus=1 --disable-usage-stats --include-dashboard=false >/dev/null 2>&1 &&
  ADDR=(--address auto)
echo "== ray head ($PY): ${ADDR[*]:-none} at $(elapsed) s"
VERSIONS='{flashinfer: [0.6.7.post3, 0.7.2.post1], wheelhouse: /tmp/wheelhouse,
           with: {0.6.7.post3: [apache-tvm-ffi==0.1.9], 0.7.2.post1: [apache-tvm-ffi==0.1.15.post2]}}'
s=$(date +%s)
$PY -m detrun.cli bisect jobs/paged.yaml --set "versions=$VERSIONS" --expect version=bitwise --no-expect-break \
  --runs-root runs -o "$OUT/bisected.yaml" "${ADDR[@]}"
echo "== bisect exit $? in $(( $(date +%s) - s )) s"
$PY -m detrun.cli history --runs-root runs
$PY -m detrun.cli history --runs-root runs --format json > "$OUT/history.json"
stop_ray
tar czf "$OUT/runs-bisect.tgz" runs/paged-bisect-*/manifest.json runs/paged-bisect-*/rows 2>/dev/null
echo "== total $(elapsed) s"
