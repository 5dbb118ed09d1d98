#!/usr/bin/env bash
# device_setup.sh's ray_python checked without a GPU: the device's layout rebuilt under /tmp/sim-rp (an image
# virtualenv over a base Python that has no Ray; Ray only on PYTHONPATH, as the carried tarball is there), then one
# Ray task whose runtime_env `pip` builds its virtualenv offline, where Ray's check_ray imports ray with an EMPTY
# environment (the H200's failure of 2026-12-05: "No module named 'ray'").
#   BASE_PY=/path/to/python3.12 bash scripts/sim_ray_python.sh      # exit 0: the task ran in its own virtualenv
#   DETRUN_SIM_OLD_PTH=1 BASE_PY=... bash scripts/sim_ray_python.sh  # the .pth before the fix: exit 1, check_ray fails
# Needs a package index for Ray 2.60 and virtualenv's wheels (downloaded once into /tmp/sim-rp). The .pth it writes
# into BASE_PY's site-packages is removed at the end.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
BASE_PY=${BASE_PY:?name a Python without Ray, e.g. BASE_PY=~/.pyenv/versions/3.12.1/bin/python3}
"$BASE_PY" -c "import ray" 2>/dev/null && { echo "sim_ray_python: $BASE_PY imports ray: name one that does not" >&2; exit 2; }
sim=/tmp/sim-rp
mkdir -p "$sim/.whl-versions"
[[ -x $sim/img/bin/python3 ]] || "$BASE_PY" -m venv "$sim/img"
[[ -d $sim/site/ray ]] || "$BASE_PY" -m pip install -q --target "$sim/site" "ray==2.60.0" || exit 2
ls "$sim"/.whl-versions/virtualenv-*.whl >/dev/null 2>&1 ||
  "$BASE_PY" -m pip download -q --no-deps -d "$sim/.whl-versions" virtualenv distlib filelock platformdirs \
    python_discovery packaging || exit 2
pth="$(env -u PYTHONPATH "$BASE_PY" -c 'import site; print(site.getsitepackages()[0])')/detrun-venv-tools.pth"
trap 'rm -f "$pth"' EXIT
cd "$sim"
export PATH=$sim/img/bin:$PATH PYTHONPATH=$sim:$sim/site RAY_AUTH_MODE=disabled RUNTIME_ENV_RETRY_TIMES=1
source <(sed -n '/^ray_python() {/,/^}/p' "$repo/scripts/device_setup.sh")
ray_python
[[ -n ${DETRUN_SIM_OLD_PTH:-} ]] && echo /tmp/venv-tools > "$pth"   # what the .pth named before the fix
echo "== PY=$PY; $pth names: $(paste -sd' ' "$pth")"
timeout 400 "$PY" - <<'EOF'
import os
import sys

import ray

ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
env = {"pip": {"packages": ["packaging"], "pip_install_options": ["--no-index", "--find-links", os.path.abspath(".whl-versions"),
                                                     "--no-deps"]}}


@ray.remote(runtime_env=env)
def where():
    import sys
    return sys.executable


try:
    print("== the task ran in", ray.get(where.remote(), timeout=300))
except ray.exceptions.RuntimeEnvSetupError as exc:
    print("== runtime_env failed:", [ln for ln in str(exc).splitlines() if "Error" in ln][-1:])
    sys.exit(1)
EOF
