#!/usr/bin/env bash
# Second, shorter device call: GPU benches, then the fixed_split_size cells one mode at a time, each
# under a timeout, with a stack-dump watchdog in the Ray workers (a hang in run 2 of gpu_check.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_setup.sh
export DETRUN_JIT_BACKENDS=fa2 DETRUN_WATCHDOG_S=40
python3 scripts/jit_warmup.py
python3 -m ray.scripts.scripts start --head --num-gpus=1 --disable-usage-stats --include-dashboard=false >/dev/null 2>&1
echo "== ready at $(elapsed) s"
timeout 60 python3 bench/digest_bench.py; echo "== digest bench exit $? at $(elapsed) s"
timeout 80 python3 bench/overhead.py jobs/paged.yaml --address auto; echo "== overhead exit $? at $(elapsed) s"
try() { local id=$1; shift; timeout 75 python3 -m detrun.cli submit jobs/paged.yaml --runs-root runs --run-id "$id" --address auto \
  --set name=$id "$@" 2>&1 | grep -vE "^(differs|explained|    )" ; echo "== $id exit ${PIPESTATUS[0]} at $(elapsed) s"; }
try fixed-eager --set flashinfer.fixed_split_size=256 --set 'modes=[eager]'
try fixed-graph --set flashinfer.fixed_split_size=256 --set 'modes=[cudagraph]' --set repeats=1
grep -l "most recent call first" /tmp/ray/session_latest/logs/worker-*.err 2>/dev/null | head -2 | while read f; do
  echo "== stacks in $f"; grep -B2 -A25 "most recent call first" "$f" | head -60; done
python3 -m ray.scripts.scripts stop --force >/dev/null 2>&1
echo "== total $(elapsed) s"
