"""One run of a job under backend sglang on CPU, inline (no Ray), in a process whose sys.path starts with one
unpacked SGLang release: SGLang's own FlashInferAttnBackend of that release, driven through detrun's task path,
with recording fake FlashInfer wrappers (tests/sglang_fakes.py) in place of flashinfer's, which need CUDA.

    PYTHONPATH=RELEASE_DIR:REPO python3 -m tests.sglang_release_run JOB RUNS_ROOT RUN_ID

The rows are stored in RUNS_ROOT like any run's. What differs from a GPU task, and nothing else: the backend gets
the fake wrappers (tests/test_sglang_wiring.py's), the task is allowed without CUDA, TRITON_INTERPRET=1 before
Triton loads (SGLang's index kernels), and transformers' Auto*.register(exist_ok=True): releases before 0.5.22
register "qwen3_asr", which this machine's transformers (5.19, 0.5.23's pin) already has; SGLang's attention code
is untouched.
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # noqa: E402  (before anything imports Triton)


def _tolerate_registered_names() -> None:
    import functools

    from transformers import AutoConfig, AutoProcessor, AutoTokenizer

    def tolerant(register):
        @functools.wraps(register)
        def wrapped(*args, **kwargs):
            return register(*args, **dict(kwargs, exist_ok=True))
        return wrapped

    for auto in (AutoConfig, AutoProcessor, AutoTokenizer):
        auto.register = tolerant(auto.register)


def main(job: str, runs_root: str, run_id: str) -> None:
    _tolerate_registered_names()
    from detrun.kernels.backends.sglang import SGLangBackend
    from detrun.run import inline, worker
    from detrun.spec.model import load_spec
    from detrun.store.runs import RunStore
    from tests.sglang_fakes import fake_api

    resolve = worker.resolve_backend
    worker.resolve_backend = lambda spec, has_cuda, load=None: resolve(spec, True, lambda: None)
    make = worker.make_backend

    def make_backend(name, spec, device, stages=None, flags=None):
        if name != "sglang":
            return make(name, spec, device, stages, flags)
        return SGLangBackend(spec, device, stages, flags, wrappers=fake_api())

    worker.make_backend = make_backend
    left = inline.run_inline(RunStore(runs_root), load_spec(job, []), run_id, 1)
    if left:
        raise SystemExit(f"cells left for isolated workers: {left}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
