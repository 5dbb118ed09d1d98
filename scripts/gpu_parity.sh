#!/usr/bin/env bash
# Train/infer parity on the H200 (issue 32): the engine's attention (FlashInfer FA2 and FA3, paged and ragged, as
# detrun models SGLang; and the SGLang 0.5.10 deterministic profile) beside the trainer's (torch SDPA with the
# flash, cudnn and efficient kernels pinned, and compiled FlexAttention) on the same cells and inputs
# (jobs/parity.yaml: jobs/paged.yaml's shapes, prefill and decode), bf16 and fp16. Runs without Ray, in this
# process (scripts/parity.py run): the torch runs in the background while FlashInfer JIT-compiles. Then every
# pair of runs of one job and dtype: which are bitwise, max ULP / abs / rel of out and LSE, and each run's error
# against an fp64 CPU attention of the same inputs (reference_error); and `detrun compare A B --expect
# backend=...` on the pairs that matter. Everything lands in $OUT (parity-*.json, the log, the runs' rows).
#   (device) bash scripts/gpu_parity.sh        carry .whl (flashinfer 0.6.7.post3; DETRUN_WHL=.whl-next: 0.7.2.post1)
# DETRUN_SGLANG=1 (carry .whl-next and .whl-sglang): also SGLang 0.5.23's OWN FlashInferAttnBackend (backend
# sglang) on the same cells (paged and ragged bf16, paged fp16; deterministic inference on the profile's cells),
# detrun's model of 0.5.23 beside it, and their compare lines. SGLang 0.5.23 needs FlashInfer 0.7.2.post1, so
# with DETRUN_SGLANG=1 EVERY run uses DETRUN_WHL=.whl-next (the default then).
# ~4 min on a fresh machine (JIT FA2 ~35 s, FA3 ~85 s per dtype; FA3 fp16 only with DETRUN_PARITY_FA3_FP16=1).
# DETRUN_GPU_BUDGET_S (default 230): a FlashInfer group started past it is skipped (said in the log).
# Runs are made with --resume: a second call on the same warm machine (runs/ kept) finishes what a killed first
# call left: complete runs are kept, a run it killed mid-way is removed and run again.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -n ${DETRUN_SGLANG:-} ]] && export DETRUN_WHL=${DETRUN_WHL:-.whl-next}
export DETRUN_GPU_BUDGET_S=${DETRUN_GPU_BUDGET_S:-230}
source scripts/device_setup.sh
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
python3 -c "import flashinfer, torch; print('flashinfer', flashinfer.__version__, 'torch', torch.__version__)"
PAR=jobs/parity.yaml
PROF="jobs/sglang-deterministic.yaml modes=[eager] repeats=1 reference_error=fp64"
PAGED=env.SGLANG_FLASHINFER_USE_PAGED=1
RAGGED=env.SGLANG_FLASHINFER_USE_PAGED=0
OWN=sglang.version=0.5.23  # DETRUN_SGLANG=1: SGLang's own backend (backend=sglang) and detrun's model of it
runs() {  # runs GROUP [SECONDS] < PLAN: one python process runs the plan's lines (RUN_ID JOB [--set ...]), timed
  local s=$(date +%s)
  timeout "${2:-600}" python3 scripts/parity.py run --resume --runs-root runs
  echo "== group $1 exit $? in $(( $(date +%s) - s )) s (at $(elapsed) s)"
}
# The trainer's side: no JIT, no flashinfer; beside the FlashInfer JIT (CPU-bound), in the background.
(
  runs torch <<PLAN
sdpa-flash-bf16 $PAR backend=sdpa sdpa.kernel=flash dtype=bf16
sdpa-cudnn-bf16 $PAR backend=sdpa sdpa.kernel=cudnn dtype=bf16
sdpa-efficient-bf16 $PAR backend=sdpa sdpa.kernel=efficient dtype=bf16
sdpa-math-bf16 $PAR backend=sdpa sdpa.kernel=math dtype=bf16
sdpa-flash-fp16 $PAR backend=sdpa sdpa.kernel=flash dtype=fp16
sdpa-cudnn-fp16 $PAR backend=sdpa sdpa.kernel=cudnn dtype=fp16
sdpa-efficient-fp16 $PAR backend=sdpa sdpa.kernel=efficient dtype=fp16
prof-sdpa-flash $PROF backend=sdpa sdpa.kernel=flash
prof-sdpa-cudnn $PROF backend=sdpa sdpa.kernel=cudnn
graph-sdpa-flash $PAR backend=sdpa sdpa.kernel=flash modes=[cudagraph]
graph-sdpa-cudnn $PAR backend=sdpa sdpa.kernel=cudnn modes=[cudagraph]
graph-sdpa-efficient $PAR backend=sdpa sdpa.kernel=efficient modes=[cudagraph]
PLAN
  # FlexAttention compiles once per case and phase (12 shapes a dtype): bounded, the fp16 run last
  runs flex 170 <<PLAN
flex-bf16 $PAR backend=flex dtype=bf16
graph-flex $PAR backend=flex dtype=bf16 modes=[cudagraph] cases={"alone":["target"]} phases=[prefill]
flex-fp16 $PAR backend=flex dtype=fp16
PLAN
) > "$OUT/parity-torch.log" 2>&1 &
torch_pid=$!
runs fa2-bf16 <<PLAN
fa2-paged-bf16 $PAR backend=flashinfer flashinfer.backend=fa2 dtype=bf16 $PAGED
fa2-ragged-bf16 $PAR backend=flashinfer flashinfer.backend=fa2 dtype=bf16 $RAGGED
prof-fa2 $PROF backend=flashinfer
PLAN
[[ -n ${DETRUN_SGLANG:-} ]] && runs model-bf16 <<PLAN
model-paged-bf16 $PAR backend=flashinfer flashinfer.backend=fa2 $OWN dtype=bf16 $PAGED
PLAN
over_budget fa3-bf16 || runs fa3-bf16 <<PLAN
fa3-paged-bf16 $PAR backend=flashinfer flashinfer.backend=fa3 dtype=bf16 $PAGED
fa3-ragged-bf16 $PAR backend=flashinfer flashinfer.backend=fa3 flashinfer.ragged_backend=fa3 dtype=bf16 $RAGGED
PLAN
over_budget fa2-fp16 || runs fa2-fp16 <<PLAN
fa2-paged-fp16 $PAR backend=flashinfer flashinfer.backend=fa2 dtype=fp16 $PAGED
fa2-ragged-fp16 $PAR backend=flashinfer flashinfer.backend=fa2 dtype=fp16 $RAGGED
PLAN
# SGLang's own backend, in a process of its own (its import stubs), after the FA2 JIT of both dtypes
if [[ -n ${DETRUN_SGLANG:-} ]]; then
  over_budget sglang-own || runs sglang-own 300 <<PLAN
sglang-own-paged-bf16 $PAR backend=sglang $OWN dtype=bf16 $PAGED
sglang-own-ragged-bf16 $PAR backend=sglang $OWN dtype=bf16 $RAGGED
sglang-own-paged-fp16 $PAR backend=sglang $OWN dtype=fp16 $PAGED
prof-sglang-own $PROF backend=sglang $OWN sglang.deterministic_inference=true
PLAN
fi
# FA3 fp16 last: its JIT (~85 s) is the one a short budget gives up first
if [[ -n ${DETRUN_PARITY_FA3_FP16:-} ]]; then
  over_budget fa3-fp16 || runs fa3-fp16 <<PLAN
fa3-paged-fp16 $PAR backend=flashinfer flashinfer.backend=fa3 dtype=fp16 $PAGED
fa3-ragged-fp16 $PAR backend=flashinfer flashinfer.backend=fa3 flashinfer.ragged_backend=fa3 dtype=fp16 $RAGGED
PLAN
fi
wait "$torch_pid"
grep -v "^USDT" "$OUT/parity-torch.log" | grep -E "^(==|   )|Error" | head -60
present() { for id in "$@"; do [[ -d runs/$id ]] && echo "$id"; done; }
pairs() {  # pairs NAME RUN...: the numbers of every pair of those runs that exist
  echo "== pairs $1"
  python3 scripts/parity.py pairs --runs-root runs --json "$OUT/parity-$1.json" $(present "${@:2}")
}
pairs bf16 fa2-paged-bf16 fa2-ragged-bf16 fa3-paged-bf16 fa3-ragged-bf16 sdpa-flash-bf16 sdpa-cudnn-bf16 \
  sdpa-efficient-bf16 sdpa-math-bf16 flex-bf16 sglang-own-paged-bf16 sglang-own-ragged-bf16 model-paged-bf16
pairs fp16 fa2-paged-fp16 fa2-ragged-fp16 fa3-paged-fp16 fa3-ragged-fp16 sdpa-flash-fp16 sdpa-cudnn-fp16 \
  sdpa-efficient-fp16 flex-fp16 sglang-own-paged-fp16
pairs sglang-deterministic prof-fa2 prof-sdpa-flash prof-sdpa-cudnn prof-sglang-own
# The backend axis claims on the pairs a parity user asks about (issue 32's compare; bitwise first, then a bound).
for d in bf16 fp16; do
  for t in sdpa-flash sdpa-cudnn flex; do
    compare "fa2-paged-$d" "$t-$d" --expect backend=bitwise
    compare "fa2-paged-$d" "$t-$d" --expect backend=ulp:4
  done
  compare "fa2-paged-$d" "fa3-paged-$d" --expect run=ulp:4   # both backend flashinfer: FA2 vs FA3 is the run axis
done
compare prof-fa2 prof-sdpa-flash --expect backend=ulp:4
if [[ -n ${DETRUN_SGLANG:-} ]]; then  # SGLang's own backend vs detrun's FA2 runs and detrun's model of 0.5.23
  for own in sglang-own-paged-bf16:fa2-paged-bf16 sglang-own-ragged-bf16:fa2-ragged-bf16 \
             sglang-own-paged-fp16:fa2-paged-fp16 sglang-own-paged-bf16:model-paged-bf16; do
    compare "${own#*:}" "${own%%:*}" --expect backend=bitwise
    compare "${own#*:}" "${own%%:*}" --expect backend=ulp:4
  done
  compare prof-sglang-own prof-sdpa-flash --expect backend=ulp:4
fi
tar czf "$OUT/runs-parity.tgz" runs/*/manifest.json runs/*/rows 2>/dev/null
echo "== total $(elapsed) s"
