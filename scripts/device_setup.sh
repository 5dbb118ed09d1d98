# Sourced by the device scripts: install the carried wheels once (into /tmp/site), set the environment.
#   source scripts/device_setup.sh      (from the repo root, on the GPU machine)
# Output goes to the terminal and to $OUT/<script>.log; elapsed prints the seconds since the script began.
OUT=${OUT:-/tmp/detrun-gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/$(basename "$0" .sh).log") 2>&1
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
only() { [[ -z ${DETRUN_GPU_ONLY:-} || " $DETRUN_GPU_ONLY " == *" $1 "* ]]; }  # DETRUN_GPU_ONLY="id id ...": run those
if [[ ! -d /tmp/site/flashinfer ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  [[ -f .whl/ray-core.tar.xz ]] && tar -C /tmp/site -xJf .whl/ray-core.tar.xz
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
export FLASHINFER_CUDA_ARCH_LIST="9.0" MAX_JOBS=16 FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws
export RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1 COLUMNS=140
# The carried packages are installed without byte-code (--no-compile): compile them once (0.7 s on the
# H200 machine; each worker's `import ray` then took 0.64 s instead of 1.04 s). DETRUN_IMPORT_TIMES=1
# prints the imports before and after.
import_times() {
  for m in torch ray flashinfer detrun.worker; do
    python3 -c "import time; t=time.perf_counter(); import $m; print('import $m %.2f s' % (time.perf_counter()-t))"
  done | paste -sd' ' -
}
if [[ ! -f /tmp/site/.compiled ]]; then
  [[ -n ${DETRUN_IMPORT_TIMES:-} ]] && echo "== imports before byte-compiling, first: $(import_times)" &&
    echo "== imports before byte-compiling, again: $(import_times)"
  s=$(date +%s.%N)
  python3 -m compileall -q -j 16 /tmp/site >/dev/null 2>&1; touch /tmp/site/.compiled
  echo "== compileall /tmp/site: $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s"
  [[ -n ${DETRUN_IMPORT_TIMES:-} ]] && echo "== imports after: $(import_times)"
fi
