#!/usr/bin/env bash
# Several device scripts in ONE device call, one after another, under one deadline, each with its own output
# folder; what comes back is one tarball per script plus one summary (the device tool brings back 8 files).
#   (device) DETRUN_CALL_DEADLINE_S=570 bash scripts/gpu_calls.sh "SCRIPT[:CAP_S][:ENV=V,ENV=V]" ...
#   e.g.     bash scripts/gpu_calls.sh "gpu_perf33.sh:230:DETRUN_GPU_ONLY=sweep-old sweep-w2 bits,DETRUN_GPU_BUDGET_S=200" \
#                                      gpu_versions.sh:240 gpu_bisect.sh
# A script gets min(CAP_S, the seconds left before the deadline less 15 for packing); one killed at its cap is
# said in the summary, and the next one still runs.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-/tmp/detrun-gpu-out}
DEADLINE=${DETRUN_CALL_DEADLINE_S:-570}
t0=$(date +%s)
mkdir -p "$FINAL"
summary=()
for item in "$@"; do
  IFS=: read -r script cap envs <<<"$item"
  name=${script%.sh}
  left=$(( DEADLINE - ($(date +%s) - t0) - 15 ))
  limit=$(( ${cap:-$left} < left ? ${cap:-$left} : left ))
  if (( left < 20 )); then summary+=("$name: not run (deadline)"); continue; fi
  out=/tmp/calls/$name
  rm -rf "$out"; mkdir -p "$out"
  envv=(); [[ -n ${envs:-} ]] && IFS=, read -ra envv <<<"$envs"
  s=$(date +%s)
  env "${envv[@]}" OUT="$out" timeout "$limit" bash "scripts/$script"
  rc=$?
  summary+=("$name: exit $rc in $(( $(date +%s) - s )) s (limit $limit s)${envs:+ [$envs]}")
  [[ -f $out/summary.txt ]] && cp "$out/summary.txt" "$FINAL/$name-summary.txt"
  tar czf "$FINAL/$name.tgz" -C /tmp/calls "$name" 2>/dev/null
done
printf '%s\n' "== calls ($(hostname), $(( $(date +%s) - t0 )) s)" "${summary[@]}" | tee "$FINAL/calls.txt"
