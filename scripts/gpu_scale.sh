#!/usr/bin/env bash
# The JIT cache and the 10,000-cell sweep on a fresh GPU machine, in one device call (~8 min), printed as
# Markdown rows for docs/performance.md ("JIT cache", "10,000-cell sweep").
#   (device) bash scripts/gpu_scale.sh     DETRUN_GPU_ONLY="variants draws jit-fa2 sweep sweep-same ...": only those;
#                                          DETRUN_SWEEP_SCALE=0.5: the sweep with half its cases;
#                                          DETRUN_GPU_BUDGET_S (560): the sweeps get what is left of it
# jit-<backend>: jobs/paged.yaml with FlashInfer's JIT dir and the cache empty (cold: it compiles and stores
# its modules under the runs root), then with the JIT dir wiped again (the modules come from the cache).
set -uo pipefail
cd "$(dirname "$0")/.."
DETRUN_GPU_BUDGET_S=${DETRUN_GPU_BUDGET_S:-560}
source scripts/device_setup.sh
echo "== installed at $(elapsed) s"
variants() {  # variants ID DIR [ARGS]: the sweep's steady cells in one process, knobs timed in turn (cell_profile.py)
  local id=$1 dir=$2; shift 2
  only "$id" || return 0
  [[ -d $dir/detrun ]] || { echo "== $id SKIPPED (no $dir/detrun)"; return; }
  timeout 300 python3 bench/cell_profile.py bench/jobs/sweep10k.yaml --repeats 3 --code "$dir" "$@" 2>&1 | tee "$OUT/$id.log"
  echo "== $id exit ${PIPESTATUS[0]} at $(elapsed) s"
}
# variants: the defaults (4 cells in flight, digests on a low-priority stream at most 3 cells behind, the heap frozen
# for the collector), digests unbounded, the collector scanning the whole heap, both (the code before), digests on
# the cells' stream; variants-old: the code in .prev (carried; see scripts/gpu_perf.sh for how to fill it).
variants variants . --rounds 6 --variants "default lag=0 gc=auto lag=0+gc=auto same"
variants variants-old .prev --rounds 2
if only draws; then  # the sweep's input draws on the CPU threads vs one thread (same bits)
  timeout 120 python3 bench/draws_bench.py --scale 0.5 2>&1 | tee "$OUT/draws.log"
  echo "== draws exit ${PIPESTATUS[0]} at $(elapsed) s"
fi
start_ray
ROWS=()
jit() {  # jit BACKEND
  local be=$1 root=$PWD/runs-jit-$1
  only "jit-$be" || return 0
  rm -rf "$root"
  for state in cold cache; do
    rm -rf "$FLASHINFER_WORKSPACE_BASE"   # FlashInfer's JIT dir (and the modules restored into it)
    local id=jit-$be-$state s=$(date +%s.%N)
    timeout 240 python3 -m detrun.cli submit jobs/paged.yaml --set flashinfer.backend="$be" --run-id "$id" \
      --runs-root "$root" "${ADDR[@]}" > "$OUT/$id.log" 2>&1
    local rc=$? wall=$(python3 -c "print(round($(date +%s.%N) - $s, 1))")
    local cache=$(python3 -m detrun.cli timings "$id" --runs-root "$root" 2>&1 | grep -m1 "^jit cache")
    echo "== $id: exit $rc, time to verdict $wall s; ${cache:-no jit cache line}; $(grep -m1 -E 'REPRODUCIBLE|FAILURE|ERROR' "$OUT/$id.log")"
    ROWS+=("| $be | $state | $wall | $rc | ${cache:--} |")
  done
}
jit fa2
jit fa3
SWEEPS=()
sweep() {  # sweep STEP [--set ...]: bench/sweep_scale.py in the runs root of jit-fa2 (its FA2 module cached)
  local step=$1; shift
  only "$step" || return 0
  local left=$(budget_left)
  if (( left < 90 )); then echo "== $step SKIPPED (time budget: ${left} s left)"; return; fi
  timeout "$left" python3 bench/sweep_scale.py --scale "${DETRUN_SWEEP_SCALE:-1}" --runs-root "$PWD/runs-jit-fa2" \
    "${ADDR[@]}" "$@" 2>&1 | tee "$OUT/$step.log"
  echo "== $step exit ${PIPESTATUS[0]} at $(elapsed) s"
  SWEEPS+=("$(grep -m1 -oP '^run \K[^:]+' "$OUT/$step.log")")
}
sweep sweep
# sweep-depth1: one launched cell in flight (DETRUN_DIGEST_DEPTH); sweep-same: digests on the cells' stream
# (DETRUN_DIGEST_STREAM=same); compared with sweep's run: the same bits.
sweep sweep-depth1 --set env.DETRUN_DIGEST_DEPTH=1
sweep sweep-same --set env.DETRUN_DIGEST_STREAM=same
sweep sweep-again  # the defaults once more: how much one machine's honest figure moves between runs
if (( ${#SWEEPS[@]} > 1 )); then
  python3 -m detrun.cli compare "${SWEEPS[@]}" --runs-root "$PWD/runs-jit-fa2" 2>&1 | tail -25
  echo "== compare ${SWEEPS[*]}: exit ${PIPESTATUS[0]}"
fi
echo "== JIT cache, jobs/paged.yaml (time to verdict: the whole \`detrun submit\`, Ray head already up)"
echo "| backend | JIT dir empty, modules from | time to verdict s | exit | jit cache (detrun timings) |"
echo "|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}" | sed 's/| cold |/| compiled |/; s/| cache |/| runs root cache |/'
stop_ray
tar czf "$OUT/runs-scale.tgz" runs-jit-*/*/manifest.json runs-jit-*/*/timings 2>/dev/null
echo "== total $(elapsed) s"
