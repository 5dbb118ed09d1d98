#!/usr/bin/env bash
# Speed on the GPU in one device call (docs/performance.md): the digest bench, then the runner overhead of
# the code before (.prev/, carried) and after, interleaved, each submit with a local Ray of its own; then
# `detrun compare` across the two codes (the same bits are expected: same inputs, replay == capture).
#   (here)   mkdir -p .prev && git archive fb81ff0 detrun | tar -x -C .prev   # the code before; carry .prev
#   (device) bash scripts/gpu_perf.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_setup.sh
echo "== installed at $(elapsed) s"
DETRUN_JIT_BACKENDS=fa2 python3 scripts/jit_warmup.py || echo "== JIT warm-up FAILED"
echo "== JIT done at $(elapsed) s"
if only digest; then timeout 240 python3 bench/digest_bench.py; echo "== digest bench exit $? at $(elapsed) s"; fi
perf() {  # perf RUN_ID new|old JOB [--set ...]: submit with that code, then its stage table
  local id=$1 code=$2; shift 2
  only "$id" || return 0
  if (( $(elapsed) > ${DETRUN_GPU_BUDGET_S:-420} )); then echo "== $id SKIPPED (time budget)"; return; fi
  [[ $code == old && ! -d .prev/detrun ]] && { echo "== $id SKIPPED (no .prev)"; return; }
  # `python3 -m` puts the working directory first on sys.path: the old code runs from inside .prev/.
  local root=$PWD dir=$PWD; [[ $code == old ]] && dir=$PWD/.prev
  local s=$(date +%s.%N)
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site timeout 180 python3 -m detrun.cli submit "$@" --runs-root "$root/runs-perf" \
     --run-id "$id" 2>&1 | grep -E "^verdict|skipped|error")
  echo "== $id ($code code${DETRUN_DIGEST:+, DETRUN_DIGEST=$DETRUN_DIGEST}): submit wall $(python3 -c "print(round($(date +%s.%N) - $s, 2))") s"
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site python3 -c "import importlib.util as u; print('== code:', u.find_spec('detrun').origin)")
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site python3 -m detrun.cli timings "$id" --runs-root "$root/runs-perf")
}
perf paged-new new $PWD/jobs/paged.yaml
perf paged-old old $PWD/jobs/paged.yaml
perf long-new new $PWD/bench/jobs/long.yaml
perf long-old old $PWD/bench/jobs/long.yaml
DETRUN_DIGEST=torch perf long-torchdigest new $PWD/bench/jobs/long.yaml
perf long2x-new new $PWD/bench/jobs/long.yaml --set requests.chunk.qo_len=8192 --set requests.chunk.prefix_len=122880
for pair in "paged-old paged-new" "long-old long-new" "long-new long-torchdigest"; do
  for id in $pair; do [[ -d runs-perf/$id ]] || continue 2; done
  python3 -m detrun.cli compare $pair --runs-root runs-perf | grep -vE "^(differs|explained|    )"
  echo "== compare $pair exit ${PIPESTATUS[0]}"
done
tar czf "$OUT/runs-perf.tgz" runs-perf/*/manifest.json runs-perf/*/rows runs-perf/*/timings 2>/dev/null
echo "== gpu_perf total $(elapsed) s"
