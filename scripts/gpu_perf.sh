#!/usr/bin/env bash
# Speed on the GPU in one device call (docs/performance.md): the digest bench, a steady-state cell profile,
# then the runner overhead of the code before (.prev/, carried) and after, interleaved, each submit with a
# local Ray of its own; `detrun compare` across the two codes (the same bits are expected: same inputs,
# replay == capture); last, 1/2/4 declared GPU slots sharing the one GPU (bench/scaling.py).
#   (here)   rm -rf .prev && mkdir .prev && git archive BEFORE detrun | tar -x -C .prev   # BEFORE: the commit before
#            the change measured (the code before); carry .prev
#   (device) bash scripts/gpu_perf.sh            (DETRUN_GPU_ONLY="id ...": only those steps; DETRUN_GPU_BUDGET_S: 420)
set -uo pipefail
cd "$(dirname "$0")/.."
DETRUN_GPU_BUDGET_S=${DETRUN_GPU_BUDGET_S:-420}
source scripts/device_setup.sh
echo "== installed at $(elapsed) s"
DETRUN_JIT_BACKENDS=fa2 python3 scripts/jit_warmup.py || echo "== JIT warm-up FAILED"
echo "== JIT done at $(elapsed) s"
if only digest; then
  timeout 240 python3 bench/digest_bench.py; echo "== digest bench exit $? at $(elapsed) s"
  TRITON_CACHE_DIR=$(mktemp -d) timeout 120 python3 bench/digest_specializations.py
  echo "== digest specializations exit $? at $(elapsed) s"
fi
cellprof() {  # cellprof ID DIR JOB [--set ...]: steady cells in one process, host and device profiles
  local id=$1 dir=$2; shift 2
  only "$id" || return 0
  [[ -d $dir/detrun ]] || { echo "== $id SKIPPED (no $dir/detrun)"; return; }
  timeout 150 python3 bench/cell_profile.py "$@" --code "$dir"; echo "== $id exit $? at $(elapsed) s"
}
cellprof cellprof-new . bench/jobs/long.yaml
cellprof cellprof-old .prev bench/jobs/long.yaml
perf() {  # perf RUN_ID new|old JOB [--set ...]: submit with that code, then its stage table
  local id=$1 code=$2; shift 2
  only "$id" || return 0
  over_budget "$id" && return
  [[ $code == old && ! -d .prev/detrun ]] && { echo "== $id SKIPPED (no .prev)"; return; }
  # `python3 -m` puts the working directory first on sys.path: the old code runs from inside .prev/.
  local root=$PWD dir=$PWD; [[ $code == old ]] && dir=$PWD/.prev
  local s=$(date +%s.%N)
  (cd "$dir" && PYTHONPATH=$dir:$SITE timeout 180 python3 -m detrun.cli submit "$@" --runs-root "$root/runs-perf" \
     --run-id "$id" 2>&1 | grep -E "^verdict|skipped|error")
  echo "== $id ($code code${DETRUN_DIGEST:+, DETRUN_DIGEST=$DETRUN_DIGEST}): submit wall $(python3 -c "print(round($(date +%s.%N) - $s, 2))") s"
  (cd "$dir" && PYTHONPATH=$dir:$SITE python3 -c "import importlib.util as u; print('== code:', u.find_spec('detrun').origin)")
  (cd "$dir" && PYTHONPATH=$dir:$SITE python3 -m detrun.cli timings "$id" --runs-root "$root/runs-perf")
}
perf long-new new $PWD/bench/jobs/long.yaml
perf long-old old $PWD/bench/jobs/long.yaml
perf paged-new new $PWD/jobs/paged.yaml
perf paged-old old $PWD/jobs/paged.yaml
DETRUN_DIGEST=torch perf paged-torchdigest new $PWD/jobs/paged.yaml
DETRUN_DIGEST=torch perf long-torchdigest new $PWD/bench/jobs/long.yaml
perf long2x-new new $PWD/bench/jobs/long.yaml --set requests.chunk.qo_len=8192 --set requests.chunk.prefix_len=122880
scaling() {  # scaling ID SLOTS JOB: declared GPU slots, all on GPU 0 (Ray leaves CUDA_VISIBLE_DEVICES alone)
  local id=$1 slots=$2 job=$3
  only "$id" || return 0
  over_budget "$id" && return
  RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1 timeout 200 python3 bench/scaling.py --job "$job" --cpus 16 --slots "$slots" 2>&1 |
    grep -vE "^(Token authentication|[0-9-]+ [0-9:,]+\s+INFO)"
  echo "== $id exit ${PIPESTATUS[0]} at $(elapsed) s"
}
scaling scaling-paged 1,2,4 jobs/paged.yaml
scaling scaling-long 1,2,4 bench/jobs/long.yaml
for pair in "paged-old paged-new" "long-old long-new" "long-new long-torchdigest" "paged-new paged-torchdigest"; do
  for id in $pair; do [[ -d runs-perf/$id ]] || continue 2; done
  python3 -m detrun.cli compare $pair --runs-root runs-perf | grep -vE "^(differs|explained|    )"
  echo "== compare $pair exit ${PIPESTATUS[0]}"
done
tar czf "$OUT/runs-perf.tgz" runs-perf/*/manifest.json runs-perf/*/rows runs-perf/*/timings 2>/dev/null
echo "== gpu_perf total $(elapsed) s"
