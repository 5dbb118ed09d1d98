#!/usr/bin/env bash
# SGLang's own FlashInferAttnBackend on the GPU (issue 28): the grid SGLANG_FLASHINFER_USE_PAGED off/on x
# deterministic inference off/on, each run every forward mode that reads the flag (prefill = EXTEND with and
# without a cached prefix, decode = DECODE, dllm = DLLM_EXTEND) in eager and CUDA-graph mode over batch
# compositions (jobs/sglang-own.yaml, backend: sglang); claims per axis (--strict), the wiring audit in every
# verdict; detrun's model of SGLang 0.5.23 (backend flashinfer, same job and inputs) beside each: compare
# MODEL OWN judges model vs SGLang; the flag and the switch along the run axis.
# FlashInfer 0.7.2.post1 (.whl-next): SGLang 0.5.23 pins 0.7.2, and on 0.6.7.post3 deterministic graph decode
# (split-KV disabled) is flashinfer #4002's illegal memory access.
#   (here)   bash scripts/pack-device-wheels.sh 0.7.2.post1 && bash scripts/pack-sglang.sh
#   (device) bash scripts/gpu_sglang_own.sh        carry .whl-next and .whl-sglang
set -uo pipefail
cd "$(dirname "$0")/.."
export DETRUN_SGLANG=1 DETRUN_WHL=${DETRUN_WHL:-.whl-next} DETRUN_GPU_BUDGET_S=${DETRUN_GPU_BUDGET_S:-470}
source scripts/device_setup.sh
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
python3 -c "import flashinfer, torch; print('flashinfer', flashinfer.__version__, 'torch', torch.__version__)"
s=$(date +%s); python3 -c "from detrun.kernels.backends import sglang_stubs as st; st.install(); \
import sglang.srt.layers.attention.flashinfer_backend; print('sglang import ok; stubs imported:', st.used())"
echo "== import SGLang's flashinfer_backend: $(( $(date +%s) - s )) s"
python3 scripts/lse_probe.py || echo "== LSE probe FAILED"
python3 scripts/jit_warmup.py || echo "== JIT warm-up FAILED"
echo "== JIT done at $(elapsed) s"
start_ray
# SGLang's own runs first (the grid), then the model's (each run's flag and switch as the own run's)
for who in own model; do
  for flag in 0 1; do
    for det in false true; do
      id=f${flag}-d${det:0:1}
      args=(--set "env.SGLANG_FLASHINFER_USE_PAGED=$flag" --set "sglang.deterministic_inference=$det"
            --set "name=sglang-own-$id")
      [[ $who == model ]] && args+=(--set backend=flashinfer)
      submit "$who-$id" jobs/sglang-own.yaml "${args[@]}"
    done
  done
done
# The negative control: an injected wiring fault (the paged wrapper run where SGLang set up ragged) must exit 1
submit own-fault jobs/sglang-own.yaml --set env.DETRUN_TEST_SGLANG_WIRING=flip-ragged --set "modes=[eager]" \
  --set "phases=[prefill]" --set repeats=1 --set name=sglang-own-fault
for v in f0-df f0-dt f1-df f1-dt; do
  compare "own-$v" --strict          # claims per axis on SGLang's own rows, wiring audit included
  compare "model-$v" "own-$v"        # model vs SGLang 0.5.23, same cells and inputs
done
compare own-f0-df own-f1-df --details 2  # the flag along the run axis (deterministic off)
compare own-f0-dt own-f1-dt --details 2  # the flag with deterministic inference
stop_ray
tar czf "$OUT/runs-sglang-own.tgz" runs/*/manifest.json runs/*/rows runs/*/timings 2>/dev/null
echo "== total $(elapsed) s"
