#!/usr/bin/env bash
# flashinfer 0.6.7.post3 and 0.7.2.post1 side by side in ONE `detrun submit`: jobs/paged.yaml with
#   versions: {flashinfer: [0.6.7.post3, 0.7.2.post1], wheelhouse: /tmp/wheelhouse, with: {<v>: [its tvm-ffi]}}
# Ray's runtime_env `pip` installs each version into a virtualenv of its own (--no-index --find-links, --no-deps),
# one run per version (runs/paged-v-flashinfer-<v>), then the runs are compared together; plan_diff shows what
# the planner chose differently. ~3-4 min on a fresh machine (two FA2 JITs ~20 s each).
#   bash scripts/pack-device-wheels.sh && bash scripts/pack-device-wheels.sh 0.7.2.post1 && bash scripts/pack-versions.sh
#   (device, carrying .whl and .whl-versions: ~62 MB) bash scripts/gpu_versions.sh
# No flashinfer and no tvm-ffi go on PYTHONPATH: a PYTHONPATH entry comes before a virtualenv's site-packages, so
# one there would shadow each run's own (the task's version check would then stop the run, exit 2).
set -uo pipefail
cd "$(dirname "$0")/.."
export DETRUN_GPU_BUDGET_S=${DETRUN_GPU_BUDGET_S:-230}
# The base site: .whl's wheels and Ray, and virtualenv (Ray's pip runs `python -m virtualenv`), without flashinfer
mkdir -p .whl-base
for f in .whl/* .whl-versions/*.whl; do
  case $(basename "$f") in flashinfer_python-*|apache_tvm_ffi-*) ;; *) ln -sf "$PWD/$f" .whl-base/ ;; esac
done
export DETRUN_WHL=.whl-base
source scripts/device_setup.sh
echo "== base site installed in $(elapsed) s"
# The wheelhouse: 0.6.7.post3's wheel as packed; 0.7.2.post1's carried tree zipped back into a wheel (the same files
# pack-device-wheels.sh kept, with a RECORD of them): pip installs both the same way
WH=/tmp/wheelhouse
if [[ ! -d $WH ]]; then
  mkdir -p $WH /tmp/fi-0.7.2.post1
  cp .whl/flashinfer_python-0.6.7.post3-*.whl .whl/apache_tvm_ffi-0.1.9-*.whl .whl-versions/apache_tvm_ffi-0.1.15.post2-*.whl $WH/
  tar -C /tmp/fi-0.7.2.post1 -xJf .whl-versions/flashinfer.tar.xz
  python3 scripts/wheel_from_tree.py /tmp/fi-0.7.2.post1 $WH
fi
ls -la $WH
echo "== wheelhouse at $(elapsed) s"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv
ray_python  # PY: Ray and the driver on the image virtualenv's base interpreter (device_setup.sh says why)
$PY -c "import sys, importlib.util as u, torch, ray; print('ray/driver python', sys.executable, sys.version.split()[0], 'in a virtualenv:',
  sys.prefix != sys.base_prefix, '| torch', torch.__version__, '| virtualenv:', u.find_spec('virtualenv') is not None,
  '| flashinfer importable outside an environment:', u.find_spec('flashinfer') is not None)"
if $PY -m ray.scripts.scripts start --head --num-gpus=1 --disable-usage-stats --include-dashboard=false >/dev/null 2>&1; then
  ADDR=(--address auto)
fi
echo "== ray head (${PY}): ${ADDR[*]:-none} at $(elapsed) s"
VERSIONS='{flashinfer: [0.6.7.post3, 0.7.2.post1], wheelhouse: /tmp/wheelhouse,
           with: {0.6.7.post3: [apache-tvm-ffi==0.1.9], 0.7.2.post1: [apache-tvm-ffi==0.1.15.post2]}}'
s=$(date +%s)
$PY -m detrun.cli submit jobs/paged.yaml --set "versions=$VERSIONS" --runs-root runs --run-id paged-v "${ADDR[@]}"
echo "== submit paged-v exit $? in $(( $(date +%s) - s )) s"
A=paged-v-flashinfer-0.6.7.post3 B=paged-v-flashinfer-0.7.2.post1
$PY - "$A" "$B" <<'PY' | tee "$OUT/environments.txt"
import json, sys
for run in sys.argv[1:]:
    try:
        m = json.load(open(f"runs/{run}/manifest.json"))
    except OSError:
        print(run, "no manifest"); continue
    import pyarrow.parquet as pq, glob
    rows = [r for f in glob.glob(f"runs/{run}/rows/*.parquet")
            for r in pq.read_table(f, columns=["version", "flashinfer", "status"]).to_pylist()]
    seen = sorted({(r["version"], r["flashinfer"], r["status"]) for r in rows})
    print(run, m["status"], "environment", json.dumps(m.get("environment")), "rows", len(rows), "(version, flashinfer, status):", seen)
PY
if [[ -d runs/$A && -d runs/$B ]]; then
  $PY -m detrun.cli compare "$A" "$B" --runs-root runs --format json > "$OUT/compare-versions.json"
  echo "== compare --format json exit $? (in compare-versions.json)"
  $PY scripts/plan_diff.py "$A" "$B" --runs-root runs
fi
for r in "$A" "$B"; do [[ -d runs/$r ]] && $PY -m detrun.cli timings "$r" --runs-root runs; done
$PY -m ray.scripts.scripts stop >/dev/null 2>&1
tar czf "$OUT/runs-versions.tgz" runs/paged-v-*/manifest.json runs/paged-v-*/rows runs/paged-v-*/timings 2>/dev/null
tar czf "$OUT/ray-runtime-env-logs.tgz" /tmp/ray/session_latest/logs/runtime_env*.log 2>/dev/null
echo "== total $(elapsed) s"
