#!/usr/bin/env bash
# A device script's steps on a CPU machine, to catch the script's own faults before device time is spent: a fake
# nvidia-smi, nothing installed (this machine's packages; DETRUN_CPU_DRY_RUN=1), the sweep shrunk to CPU sizes
# (DETRUN_SWEEP_JOB: 2 cases, 4 repeats, 4 heads of 32); the reference backend runs every cell. Its figures mean
# nothing; its exit codes and the summary's lines do.
#   bash scripts/cpu_dry_run.sh gpu_perf33.sh [ENV=V ...]     e.g. DETRUN_GPU_ONLY="sweep-old sweep-w2 bits"
# gpu_perf33.sh's sweep-old step reads .prev (gpu_perf33.sh's header says how to make it); its draws step needs a
# GPU and fails here (it asks for --counter cuda).
set -uo pipefail
cd "$(dirname "$0")/.."
script=${1:?name a device script, e.g. gpu_perf33.sh}
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#!/bin/sh\necho "no GPU (cpu_dry_run.sh), -, -"\n' > "$tmp/nvidia-smi"
chmod +x "$tmp/nvidia-smi"
python3 - "$tmp/sweep.yaml" <<'EOF'
import sys

import yaml

sys.path.insert(0, "bench")
from sweep_scale import scaled  # noqa: E402

data = scaled(yaml.safe_load(open("bench/jobs/sweep10k.yaml")), 0.01, 0.01)
data.update(name="sweep-cpu", heads={"qo": 4, "kv": 2}, head_dim=32, repeats=4, repeats_per_task=4)
yaml.safe_dump(data, open(sys.argv[1], "w"))
EOF
env PATH="$tmp:$PATH" DETRUN_CPU_DRY_RUN=1 DETRUN_SWEEP_JOB="$tmp/sweep.yaml" OUT="${OUT:-$tmp/out}" "$@" \
  bash "scripts/$script"
