#!/usr/bin/env bash
# The whole GPU check in one device call: install the carried wheels, JIT-compile (timed), run the
# verification matrix through `detrun submit` on Ray, compare. Log and stored rows go to $OUT.
#   bash scripts/pack-device-wheels.sh   # here, once: fills .whl/
#   (device) bash scripts/gpu_check.sh   DETRUN_GPU_ONLY="paged ragged ...": only those submits (the run ids below);
#                                        DETRUN_GPU_BENCH=1 (or =digest): the overhead (and digest) benches too;
#                                        DETRUN_JIT_BACKENDS=fa2: warm only FA2 up (scripts/jit_warmup.py)
# fixed-probe, a step that runs only when DETRUN_GPU_ONLY names it (DETRUN_GPU_ONLY=fixed-probe
# DETRUN_JIT_BACKENDS=fa2: the probe of the fixed_split_size hang, docs/gpu-results.md run 3): the digest and
# overhead benches, then the fixed_split_size cells one mode at a time, each under a timeout, with a stack-dump
# watchdog in the Ray workers (DETRUN_WATCHDOG_S, default 40 here, set before the Ray head starts so that its
# workers inherit it; while it is set the workers' cell watchdog is off), and the stacks the workers printed.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_setup.sh
named fixed-probe && export DETRUN_WATCHDOG_S=${DETRUN_WATCHDOG_S:-40}
prepare_gpu
# A GPU task whose flashinfer does not import: `backend: auto` must give error rows, never the reference.
mkdir -p /tmp/broken-fi/flashinfer
echo 'raise ImportError("libflashinfer.so: cannot open shared object file (a broken install, on purpose)")' \
  > /tmp/broken-fi/flashinfer/__init__.py
submit paged jobs/paged.yaml
submit paged-r2 jobs/paged.yaml --set name=paged-r2 --set repeats_per_task=2   # repeat 1 replays repeat 0's graphs
submit ragged jobs/ragged.yaml
submit ragged-r2 jobs/ragged.yaml --set name=ragged-r2 --set repeats_per_task=2   # ragged+prefix graphs replayed
# Known-bug graph cells run alone in sacrificial workers (isolation.samples per bug and run).
ISO=(--set "isolation.cell_timeout_s=${DETRUN_CELL_TIMEOUT_S:-300}")
submit paged-nosplit jobs/paged.yaml --set name=paged-nosplit --set flashinfer.disable_split_kv=true "${ISO[@]}"
submit ragged-nosplit jobs/ragged.yaml --set name=ragged-nosplit --set flashinfer.disable_split_kv=true "${ISO[@]}"
submit paged-fixed jobs/paged.yaml --set name=paged-fixed --set flashinfer.fixed_split_size=256 "${ISO[@]}"
# The gate lifted: the known-bug cells run in their shard, in order; a crash there is isolated like any other.
submit paged-nosplit-inline jobs/paged.yaml --set name=paged-nosplit --set flashinfer.disable_split_kv=true \
  --set isolation.known_bugs=inline "${ISO[@]}"
submit paged-fa3 jobs/paged.yaml --set name=paged-fa3 --set flashinfer.backend=fa3
submit paged-fa3-r2 jobs/paged.yaml --set name=paged-fa3-r2 --set flashinfer.backend=fa3 --set repeats_per_task=2
submit ragged-fa3 jobs/ragged.yaml --set name=ragged-fa3 --set flashinfer.backend=fa3 --set flashinfer.ragged_backend=fa3
submit sglang-default jobs/ragged.yaml --set name=sglang-default --set flashinfer.ragged_backend=auto
submit deterministic jobs/ragged.yaml --set name=deterministic --set deterministic=true --set flashinfer.fixed_split_size=256 "${ISO[@]}"
submit paged-bitwise jobs/paged.yaml --set name=paged --set expect.batch=bitwise   # the claim in the spec
submit paged-again jobs/paged.yaml   # a second night of the same job, against paged as its baseline
submit broken-fi jobs/paged.yaml --set name=broken-fi --set "env.PYTHONPATH=/tmp/broken-fi:$PWD:$SITE"
if named fixed-probe; then
  timeout 60 python3 bench/digest_bench.py; echo "== digest bench exit $? at $(elapsed) s"
  timeout 80 python3 bench/overhead.py jobs/paged.yaml "${ADDR[@]}"; echo "== overhead exit $? at $(elapsed) s"
  probe() {  # probe RUN_ID [--set ...]: jobs/paged.yaml under a 75 s timeout, its verdict lines
    local id=$1; shift
    timeout 75 python3 -m detrun.cli submit jobs/paged.yaml --runs-root runs --run-id "$id" "${ADDR[@]}" \
      --set name="$id" "$@" 2>&1 | grep -vE "^(differs|explained|    )"
    echo "== $id exit ${PIPESTATUS[0]} at $(elapsed) s"
  }
  probe fixed-eager --set flashinfer.fixed_split_size=256 --set 'modes=[eager]'
  probe fixed-graph --set flashinfer.fixed_split_size=256 --set 'modes=[cudagraph]' --set repeats=1
  grep -l "most recent call first" /tmp/ray/session_latest/logs/worker-*.err 2>/dev/null | head -2 | while read -r f; do
    echo "== stacks in $f"; grep -B2 -A25 "most recent call first" "$f" | head -60
  done
fi
compare paged ragged
compare paged paged-r2
compare ragged ragged-r2
compare paged-nosplit ragged-nosplit
compare paged-fa3 ragged-fa3
compare paged sglang-default
compare paged paged-nosplit
compare paged paged-fixed
compare paged paged-fa3
compare paged --expect batch=bitwise                     # claims at compare time: FA2 batch variance breaks it
compare paged --expect mode=bitwise
compare paged-fa3 --expect batch=bitwise --expect mode=bitwise
compare ragged-fa3 --expect batch=bitwise --expect mode=bitwise
if [[ -d runs/paged && -d runs/paged-again ]]; then
  python3 -m detrun.cli baseline set paged --runs-root runs
  compare paged-again --baseline --require-baseline --junit "$OUT/junit.xml"
  python3 -m detrun.cli report paged-again --baseline --runs-root runs -o "$OUT/report.html"
  python3 -m detrun.cli history --runs-root runs
fi
if [[ -n ${DETRUN_GPU_BENCH:-} ]]; then
  [[ ${DETRUN_GPU_BENCH} == *digest* ]] && python3 bench/digest_bench.py
  bench() { echo "== overhead $*"; python3 bench/overhead.py "$@" "${ADDR[@]}"; echo "== overhead exit $? at $(elapsed) s"; }
  bench jobs/paged.yaml
  bench jobs/paged.yaml --set flashinfer.profile_kernels=false
  bench jobs/paged.yaml --set repeats_per_task=2
  bench bench/jobs/long.yaml
  bench bench/jobs/long.yaml --set flashinfer.profile_kernels=false
fi
stop_ray
tar czf "$OUT/runs-rows.tgz" runs/*/manifest.json runs/*/rows runs*/*/timings runs-bench/*/manifest.json 2>/dev/null
echo "== total $(elapsed) s"
