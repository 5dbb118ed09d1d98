# Sourced by the device scripts: install the carried packages once (into $SITE), set the environment.
#   source scripts/device_setup.sh      (from the repo root, on the GPU machine)
# Output goes to the terminal and to $OUT/<script>.log; elapsed prints the seconds since the script began.
OUT=${OUT:-/tmp/detrun-gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/$(basename "$0" .sh).log") 2>&1
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
# A script's steps are named; DETRUN_GPU_ONLY="id id ..." runs only those (only: every step when it is unset),
# named: a step that runs only when DETRUN_GPU_ONLY names it (a probe, not part of the full check).
only() { [[ -z ${DETRUN_GPU_ONLY:-} || " $DETRUN_GPU_ONLY " == *" $1 "* ]]; }
named() { [[ " ${DETRUN_GPU_ONLY:-} " == *" $1 "* ]]; }
# The time budget: DETRUN_GPU_BUDGET_S seconds from the start (500 unless the script sets another default);
# a step started past it is skipped. budget_left: the seconds left; over_budget ID: past it (says ID is skipped).
budget_left() { echo $(( ${DETRUN_GPU_BUDGET_S:-500} - $(elapsed) )); }
over_budget() { (( $(budget_left) < 0 )) && echo "== $1 SKIPPED (time budget)"; }
# DETRUN_WHL: the carried folder (scripts/pack-device-wheels.sh [VERSION]): .whl (the pinned flashinfer) or
# .whl-next; each installs into its own SITE, wheels first, then its tarballs (Ray, a stripped flashinfer).
DETRUN_WHL=${DETRUN_WHL:-.whl}
SITE=/tmp/site${DETRUN_WHL#.whl}
if [[ -z ${DETRUN_CPU_DRY_RUN:-} && ! -d $SITE/flashinfer ]]; then  # a dry run (cpu_dry_run.sh): this machine's packages
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$DETRUN_WHL"/*.whl
  for t in "$DETRUN_WHL"/*.tar.xz; do [[ -f $t ]] && tar -C "$SITE" -xJf "$t"; done
fi
export PYTHONPATH=$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH} PATH=$SITE/bin:$PATH
# DETRUN_SGLANG=1: SGLang's own backend (scripts/pack-sglang.sh filled .whl-sglang): its pure-Python tree and the
# wheels the image lacks into $SITE. sgl_kernel is not there: the backend stands detrun's import stub in for it
# (kernels/backends/sglang_stubs.py), and each row's wiring names the stubs a task imported.
if [[ -n ${DETRUN_SGLANG:-} ]]; then
  if [[ ! -d $SITE/sglang ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl-sglang/*.whl
    tar -C "$SITE" -xJf .whl-sglang/sglang-tree.tar.xz
  fi
  echo "== SGLang $(python3 -c 'from importlib.metadata import version; print(version("sglang"))') from .whl-sglang"
fi
export FLASHINFER_CUDA_ARCH_LIST="9.0" MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws
export RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1 COLUMNS=140
# The carried packages are installed without byte-code (--no-compile): compile them once (0.7 s on the
# H200 machine; each worker's `import ray` then took 0.64 s instead of 1.04 s). DETRUN_IMPORT_TIMES=1
# prints the imports before and after.
import_times() {
  for m in torch ray flashinfer detrun.run.worker; do
    python3 -c "import time; t=time.perf_counter(); import $m; print('import $m %.2f s' % (time.perf_counter()-t))"
  done | paste -sd' ' -
}
if [[ -z ${DETRUN_CPU_DRY_RUN:-} && ! -f $SITE/.compiled ]]; then
  [[ -n ${DETRUN_IMPORT_TIMES:-} ]] && echo "== imports before byte-compiling, first: $(import_times)" &&
    echo "== imports before byte-compiling, again: $(import_times)"
  s=$(date +%s.%N)
  python3 -m compileall -q -j 16 "$SITE" >/dev/null 2>&1; touch "$SITE/.compiled"
  echo "== compileall $SITE: $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s"
  [[ -n ${DETRUN_IMPORT_TIMES:-} ]] && echo "== imports after: $(import_times)"
fi

# The device scripts' steps: a Ray head for the submits (start_ray, stop_ray), submit RUN_ID JOB [--set ...],
# compare RUN... [OPTIONS].
ADDR=()
start_ray() {
  if python3 -m ray.scripts.scripts start --head --num-gpus=1 --disable-usage-stats --include-dashboard=false >/dev/null 2>&1; then
    ADDR=(--address auto)
  fi
  echo "== ray head: ${ADDR[*]:-none (each submit starts a local Ray)} at $(elapsed) s"
}
stop_ray() { python3 -m ray.scripts.scripts stop "$@" >/dev/null 2>&1; }
submit() {  # skipped unless DETRUN_GPU_ONLY names it, or past DETRUN_GPU_BUDGET_S
  local id=$1; shift
  only "$id" || return 0
  over_budget "$id" && return
  local s=$(date +%s)
  python3 -m detrun.cli submit "$@" --runs-root runs --run-id "$id" "${ADDR[@]}"
  echo "== submit $id exit $? in $(( $(date +%s) - s )) s"
}
compare() {  # skipped when a run was not made
  local id
  for id in "$@"; do [[ $id == -* ]] && break; [[ -d runs/$id ]] || return 0; done
  python3 -m detrun.cli compare "$@" --runs-root runs
  echo "== compare $* exit $?"
}
prepare_gpu() {  # versions, the timed JIT warm-up, a Ray head: the start of a full device check
  echo "== installed in $(elapsed) s"
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv
  nvcc --version | tail -2
  python3 -c "import flashinfer, torch, ray; print('flashinfer', flashinfer.__version__, 'torch', torch.__version__, 'ray', ray.__version__)"
  python3 scripts/jit_warmup.py || echo "== JIT warm-up FAILED"
  echo "== JIT done at $(elapsed) s"
  start_ray
}

# ray_python: PY, the Python that runs Ray and the driver for a job with `versions:` (scripts/gpu_versions.sh,
# gpu_bisect.sh). Ray's pip builds each environment with `python -m virtualenv --system-site-packages`, but when
# the Python running Ray is itself a virtualenv (the image's: /opt/torch/.venv) it copies that one whole (torch,
# jax, cupy: many GB) for each environment. So Ray runs on its base interpreter, the image's packages on
# PYTHONPATH (after the repo and $SITE). Ray starts `python -m virtualenv` with an EMPTY environment
# (ray/_private/runtime_env/virtualenv_utils.py: env = {}; measured on the H100, 2026-12-05: "No module named
# virtualenv"), so virtualenv and its needs (carried in .whl-versions) go into /tmp/venv-tools, named by a .pth
# file in the base interpreter's site-packages. Ray's pip also checks `import ray` in each new environment with an
# EMPTY environment (ray/_private/runtime_env/dependency_utils.py check_ray: env = {}; measured on the H200,
# 2026-12-05: "flashinfer==0.6.7.post3 cannot be installed: No module named 'ray'"), so the same .pth names every
# PYTHONPATH entry but the repo ($SITE: Ray; the image's site-packages: Ray's needs), after the tools. The
# environments still put their own site-packages first. DETRUN_RAY_IN_VENV=1: Ray on the image's Python, as it is.
ray_python() {
  local base venv tools=/tmp/venv-tools
  PY=python3
  read -r base venv < <(python3 -c "import os, site, sys; print(os.path.join(sys.base_prefix, 'bin', 'python3'),
      site.getsitepackages()[0] if sys.prefix != sys.base_prefix else '')")
  [[ -n ${DETRUN_RAY_IN_VENV:-} || -z ${venv:-} || ! -x $base ]] && return 0
  PY=$base
  export PYTHONPATH=$PYTHONPATH:$venv
  if [[ ! -d $tools/virtualenv ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$tools" \
      .whl-versions/{virtualenv,distlib,filelock,platformdirs,python_discovery,packaging}-*.whl
  fi
  local pth entry entries
  pth="$(env -u PYTHONPATH "$base" -c 'import site; print(site.getsitepackages()[0])')/detrun-venv-tools.pth"
  echo "$tools" > "$pth"
  IFS=: read -ra entries <<<"$PYTHONPATH"
  for entry in "${entries[@]}"; do [[ -n $entry && $entry != "$PWD" ]] && echo "$entry" >> "$pth"; done
  env -i "$base" -c "import virtualenv, ray" || echo "== ray_python: $base cannot import virtualenv and ray without PYTHONPATH"
}
