#!/usr/bin/env bash
# Issue 33 on one fresh GPU machine, one device call (~4-5 min): jobs/paged.yaml's time to verdict with an
# empty JIT cache, then with the runs root's cache; the 10,000-cell sweep (bench/jobs/sweep10k.yaml) the way
# before (the code in .prev, one worker per GPU) and the new way (DETRUN_WORKERS_PER_GPU=2; then this code with
# one worker if time is left), from the warm cache; the rows compared on the run axis (the same bits). Ends
# with one summary block, also written to $OUT/summary.txt.
#   (here)   rm -rf .prev && mkdir .prev && git archive BEFORE detrun | tar -x -C .prev   # BEFORE: the commit before
#            the change (the merge-base of this branch); carry .prev
#   (device) bash scripts/gpu_perf33.sh        carry: .whl .prev
#            DETRUN_GPU_ONLY="paged dgraph sweep-old draws sweep-w2 sweep-c2 sweep-w1 sweep-ng sweep-w4 bits": only those (sweep-w4,
#            4 workers per GPU, profcost (bench/profile_cost.py), hostprof (bench/cell_profile.py), graphab (its rounds with digest graphs on and off), sweep-head (this code, one worker, against a Ray head started first), sweep-hc (the same with draws: counter), hostray (its rounds in a process and in a Ray task), profpre (CUPTI's set-up before the CUDA context and after), warm (the sweep's JIT modules compiled before the sweeps), wdog (bench/watchdog_cost.py), cupti (bench/cupti_start.py), sweep-d8 (DETRUN_DIGEST_DEPTH=8), sweep-cupti (DETRUN_KERNEL_TRACER=cupti), sweep-ring (DETRUN_DRAW_RING_MB=1024: the pinned ring) and threads (draws on 8 and 15 threads) run only when named; sweep-c2: draws: counter,
#            2 workers; sweep-ng: DETRUN_DIGEST_GRAPHS=off, not in the bits check); DETRUN_PAGED_H200_ONLY=1: paged
#            only on an H200 (three H100s measured it); DETRUN_GPU_BUDGET_S
#            (280): a sweep needs 75 s of it left; DETRUN_SWEEP_JOB: another job for every sweep step (a smaller
#            one for scripts/cpu_dry_run.sh, which runs this script's steps on a CPU machine)
set -uo pipefail
cd "$(dirname "$0")/.."
DETRUN_GPU_BUDGET_S=${DETRUN_GPU_BUDGET_S:-280}
source scripts/device_setup.sh
echo "== installed at $(elapsed) s"
ROOT=$PWD RR=$PWD/runs-33 old="" JOB=$(realpath "${DETRUN_SWEEP_JOB:-bench/jobs/sweep10k.yaml}")
rm -rf "$RR"
S=("machine: host $(hostname); GPU $(nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader | head -1)"
   "  CPU $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)")
wall_since() { python3 -c "print(round($(date +%s.%N) - $1, 1))"; }
# No Ray head: each submit starts a local Ray of its own (as a user's `detrun submit` does), so the old run's
# workers import the code in .prev (a head's workers would import this code); every wall includes that start.

card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if only paged && [[ -n ${DETRUN_PAGED_H200_ONLY:-} && $card != *H200* ]]; then  # three H100s measured it already
  echo "== paged SKIPPED: $card is not an H200 (DETRUN_PAGED_H200_ONLY)"; S+=("paged: skipped on $card (DETRUN_PAGED_H200_ONLY)")
elif only paged; then  # FlashInfer's JIT dir empty both times; the second restores the modules from the runs root
  for state in empty cache; do
    rm -rf "$FLASHINFER_WORKSPACE_BASE"
    s=$(date +%s.%N)
    timeout 200 python3 -m detrun.cli submit jobs/paged.yaml --run-id "paged-$state" --runs-root "$RR" \
      > "$OUT/paged-$state.log" 2>&1
    rc=$? w=$(wall_since "$s")
    declare "paged_$state=$w"
    echo "== paged-$state: exit $rc, $w s; $(python3 -m detrun.cli timings "paged-$state" --runs-root "$RR" 2>&1 |
      grep -m1 '^jit cache')"
  done
  S+=("paged.yaml to verdict: empty JIT cache $paged_empty s, runs root's cache $paged_cache s:" \
      "  ratio $(python3 -c "print(round($paged_cache / $paged_empty, 2))")")
fi

# FlashInfer's modules for the sweep compiled first into the runs root's JIT cache (a small sweep of the same job):
# every sweep after it, the code before too, starts warm (on an H100, where paged is skipped, the first sweep compiled)
if named warm; then
  s=$(date +%s.%N)
  timeout 200 python3 bench/sweep_scale.py --job "$JOB" --runs-root "$RR" --run-id warm --scale 0.02 \
    --set repeats=1 --set repeats_per_task=1 > "$OUT/warm.log" 2>&1
  rc=$?; echo "== warm (the sweep's JIT modules): exit $rc, $(wall_since "$s") s"
  S+=("warm (a small sweep compiling the JIT modules first): exit $rc, $(wall_since "$s") s")
fi

# The way before: the code in .prev (one worker per GPU, the job's one task of 40 repeats); without .prev,
# this code with one worker per GPU (and no bits check against the code before).
REF=()
if only sweep-old; then
  s=$(date +%s.%N)
  if [[ -d .prev/detrun ]]; then
    old="the code before (.prev)"
    (cd .prev && PYTHONPATH=$ROOT/.prev:$SITE timeout 200 python3 -m detrun.cli submit "$JOB" \
       --run-id sweep-old --runs-root "$RR") > "$OUT/sweep-old.log" 2>&1
  else
    old="this code, 1 worker per GPU (no .prev)"
    timeout 200 python3 -m detrun.cli submit "$JOB" --run-id sweep-old --runs-root "$RR" \
      > "$OUT/sweep-old.log" 2>&1
  fi
  rc=$? w=$(wall_since "$s")
  echo "== sweep-old ($old): exit $rc, $w s"
  python3 -m detrun.cli timings sweep-old --runs-root "$RR" >> "$OUT/sweep-old.log" 2>&1
  tail -25 "$OUT/sweep-old.log"
  S+=("sweep, the way before ($old): exit $rc, process wall (to verdict) $w s"
      "  $(grep -m1 -A1 '^steady state' "$OUT/sweep-old.log" | paste -sd' ')")
  REF=(--reference sweep-old)
fi

stage_seconds() {  # the draws' stages in a sweep's log: "name s; name s"
  awk -F'│' '/│ (inputs: move to device|inputs: wait for draws|draws: pinned ring) /{gsub(/^ +| +$/, "", $2);
    printf "%s%s %.3f s", sep, $2, $3; sep="; "}' "$1"
}
sweep_new() {  # sweep_new ID WORKERS [ARGS]: bench/sweep_scale.py, N workers per GPU, against sweep-old
  local id=$1 n=$2; shift 2
  local left=$(budget_left)
  if (( left < 75 )); then echo "== $id SKIPPED (time budget: $left s left)"; S+=("$id: skipped (time budget)"); return; fi
  local s=$(date +%s.%N)
  timeout "$left" python3 bench/sweep_scale.py --job "$JOB" --runs-root "$RR" --run-id "$id" --workers-per-gpu "$n" "${REF[@]}" "$@" \
    > "$OUT/$id.log" 2>&1
  local rc=$? w=$(wall_since "$s")
  echo "== $id ($n worker(s) per GPU): exit $rc, process wall $w s"
  grep -E "^(steady state|cells/s|time to verdict|GPU steady|reference)" "$OUT/$id.log"
  S+=("sweep $id, $n worker(s) per GPU${*:+ ($*)}: exit $rc, process wall $w s; $(grep -m1 '^time to verdict:' "$OUT/$id.log")"
      "  $(grep -m1 '^GPU steady' "$OUT/$id.log")" "  $(grep -m1 '^reference' "$OUT/$id.log")"
      "  $(grep -m1 '^critical path' "$OUT/$id.log")" "  $(stage_seconds "$OUT/$id.log")")
}
bench_step() {  # bench_step ID TIMEOUT_S SCRIPT [ARGS]: python3 SCRIPT into $OUT/ID.log, printed and in the summary
  local id=$1 limit=$2; shift 2
  timeout "$limit" python3 "$@" > "$OUT/$id.log" 2>&1
  local rc=$?; cat "$OUT/$id.log"
  S+=("$id ($*): exit $rc" "$(sed 's/^/  /' "$OUT/$id.log")")
}
# a cell's digest launch from a CUDA graph: the same bits as a plain launch, and the host's time per launch
only dgraph && bench_step dgraph 90 scripts/digest_graph_check.py
# the host's time per cell of the shard task's cell watchdog: faulthandler armed per cell (before) and once a second
named wdog && bench_step wdog 40 bench/watchdog_cost.py --cells 1000 --rounds 3
# draws: counter on the GPU against the threaded CPU draws (its bits against the CPU's)
only draws && bench_step draws 120 bench/draws_bench.py --scale 0.5 --counter cuda
# the CPU draws on 8 (a task's) and 15 threads
named threads && bench_step threads 90 bench/draws_bench.py --scale 0.5 --threads 8,15
# CUPTI's set-up (the first session's prepare) before the CUDA context and after it, each in a fresh process
named profpre && bench_step profpre-first 60 bench/profile_cost.py --cells 10 --prepare-first && \
  bench_step profpre-after 60 bench/profile_cost.py --cells 10
# where the first profile session's start goes: CUPTI's own set-up (cupti-python, kernel records only) or kineto's
named cupti && bench_step cupti 150 bench/cupti_start.py --rounds 2
# what one kernel-audit profile costs, and two cheaper ways
named profcost && bench_step profcost 60 bench/profile_cost.py && bench_step profcost-beside 60 bench/profile_cost.py \
  --cells 10 --prepare-beside-draws
# the digest graphs on and off, interleaved in one process (bench/cell_profile.py's rounds), from the warm JIT cache
# (only with 180 s of the budget left: the sweeps after it come first)
named graphab && (( $(budget_left) >= 180 )) && bench_step graphab 150 bench/cell_profile.py "$JOB" --repeats 2 --rounds 3 --rounds-only \
  --variants "default graphs=off"
# where a steady cell's host time goes (cProfile, torch.profiler), in one process, from the warm JIT cache
named hostprof && bench_step hostprof 150 bench/cell_profile.py "$JOB" --repeats 2
# the same steady cells in this process, in a Ray task at Ray's niceness (15) and at 0: what Ray costs the host
if named hostray; then
  declare -A how=([process]="" [ray]="--in-ray" [ray-nice0]="--in-ray --ray-env RAY_worker_niceness=0")
  for where in process ray ray-nice0; do
    timeout 120 python3 bench/cell_profile.py "$JOB" --repeats 2 --rounds 2 --rounds-only ${how[$where]} \
      > "$OUT/hostray-$where.log" 2>&1
    rc=$?; cat "$OUT/hostray-$where.log"
    S+=("hostray, $where: exit $rc" "$(grep -E "round [0-9]|thread on a CPU|process [0-9]" "$OUT/hostray-$where.log" |
        sed 's/^/  /')")
  done
fi
only sweep-w2 && sweep_new sweep-w2 2
only sweep-c2 && sweep_new sweep-c2 2 --set draws=counter  # other inputs: not in the bits check
only sweep-w1 && sweep_new sweep-w1 1     # this code, one worker per GPU: the draws ahead without the workers
only sweep-ng && sweep_new sweep-ng 1 --set env.DETRUN_DIGEST_GRAPHS=off  # the same, digests launched as before
# this code with the drawn sets and the slot indices moved through pinned memory (kernels/pinned_ring.py; off by default
# until measured): queued copies instead of copies from pageable memory that hold the task's thread
named sweep-ring && sweep_new sweep-ring 1 --set env.DETRUN_DRAW_RING_MB=1024
if named sweep-head || named sweep-hc; then  # this code against a running Ray head (a nightly's cluster, --address)
  start_ray
  if (( ${#ADDR[@]} )); then
    named sweep-head && sweep_new sweep-head 1 "${ADDR[@]}"
    # the same with draws: counter (the inputs made on the device): other inputs, not in the bits check
    named sweep-hc && sweep_new sweep-hc 1 "${ADDR[@]}" --set draws=counter
  fi
  stop_ray
fi
named sweep-w4 && sweep_new sweep-w4 4    # only when DETRUN_GPU_ONLY names it
# eight cells in flight (four by default): a slow host's host work per cell is about a kernel's, so the GPU idles
# wherever a run of small kernels outlasts what the queue holds; in the bits check
named sweep-d8 && sweep_new sweep-d8 1 --set env.DETRUN_DIGEST_DEPTH=8
# the kernel audit's session recorded by CUPTI itself (cupti-python), not torch.profiler: its set-up on the critical
# path; in the bits check, and last, so plan_diff compares its kernels with the first run's
named sweep-cupti && sweep_new sweep-cupti 1 --set env.DETRUN_KERNEL_TRACER=cupti

if only bits; then  # the same keys' digests across the runs: the run axis holds
  runs=(); for id in sweep-old sweep-w2 sweep-w1 sweep-ring sweep-ng sweep-head sweep-w4 sweep-d8 sweep-cupti; do [[ -f $RR/$id/manifest.json ]] && runs+=("$id"); done
  if (( ${#runs[@]} > 1 )); then
    python3 -m detrun.cli compare "${runs[@]}" --runs-root "$RR" > "$OUT/bits.log" 2>&1
    rc=$?
    tail -15 "$OUT/bits.log"
    S+=("bits: detrun compare ${runs[*]}: exit $rc (0: the run axis held; sweep-old: $old)"
        "  $(grep -m1 '^verdict' "$OUT/bits.log")")
    # the kernels each plan recorded, the way before (a second run per plan) against this code's (kernel_session.py)
    python3 scripts/plan_diff.py "${runs[0]}" "${runs[-1]}" --runs-root "$RR" --kernels > "$OUT/kernels.log" 2>&1
    rc=$?; cat "$OUT/kernels.log"
    S+=("kernels: scripts/plan_diff.py --kernels ${runs[0]} ${runs[-1]}: exit $rc" "$(sed 's/^/  /' "$OUT/kernels.log")")
  fi
fi
tar czf "$OUT/runs-33.tgz" -C "$RR" --exclude='*/rows' --exclude=./jit-cache . 2>/dev/null
S+=("total $(elapsed) s")
printf '%s\n' "== summary (issue 33)" "${S[@]}" | tee "$OUT/summary.txt"
