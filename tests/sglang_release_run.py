"""One run of a job under backend sglang, inline (no Ray), in a process whose sys.path starts with one unpacked
SGLang release: SGLang's own FlashInferAttnBackend of that release, driven through detrun's task path; and
ReleaseProbe, `detrun bisect`'s probe that runs each release so (tests/test_bisect_sglang_releases.py on CPU,
scripts/sglang_release_bisect.py on a GPU).

    PYTHONPATH=RELEASE_DIR:REPO python3 -m tests.sglang_release_run JOB RUNS_ROOT RUN_ID [--fake]

The rows are stored in RUNS_ROOT like any run's. What differs from a task of a normal run: transformers'
Auto*.register(exist_ok=True) (releases before 0.5.22 register "qwen3_asr", which transformers 5.17 and later
already have; SGLang's attention code is untouched); with --fake (CPU): the backend gets recording fake FlashInfer
wrappers (tests/sglang_fakes.py, as tests/test_sglang_wiring.py), the task is allowed without CUDA, and
TRITON_INTERPRET=1 before Triton loads (SGLang's index kernels).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

FAKE = "--fake" in sys.argv[1:] and __name__ == "__main__"
if FAKE:
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports Triton
REPO = Path(__file__).resolve().parents[1]


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


def _fake_wrappers() -> None:
    from detrun.kernels.backends.sglang import SGLangBackend
    from detrun.run import worker
    from tests.sglang_fakes import fake_api

    resolve, make = worker.resolve_backend, worker.make_backend
    worker.resolve_backend = lambda spec, has_cuda, load=None: resolve(spec, True, lambda: None)

    def make_backend(name, spec, device, stages=None, flags=None):
        if name != "sglang":
            return make(name, spec, device, stages, flags)
        return SGLangBackend(spec, device, stages, flags, wrappers=fake_api())

    worker.make_backend = make_backend


def main(job: str, runs_root: str, run_id: str, fake: bool) -> None:
    _tolerate_registered_names()
    if fake:
        _fake_wrappers()
    from detrun.run import inline
    from detrun.spec.model import load_spec
    from detrun.store.runs import RunStore

    left = inline.run_inline(RunStore(runs_root), load_spec(job, []), run_id, 1)
    if left:
        raise SystemExit(f"cells left for isolated workers: {left}")


class ReleaseProbe:
    """bisect's probe: the job pinned to the release (written beside bisect's output), run by this module in a
    process whose sys.path starts with that release's tree (trees: release -> folder holding its sglang/ and
    dist-info), judged by its claims as bisect's own probe judges a submitted run. Install it with
    ReleaseProbe.install(monkeypatch_setattr, trees, fake)."""

    def __init__(self, req, data, store, trees: Dict[str, Path], fake: bool):
        self.req, self.data, self.store, self.trees, self.fake = req, data, store, trees, fake
        self.runs: List[str] = []

    @classmethod
    def install(cls, setattr_, trees: Dict[str, Path], fake: bool) -> None:
        """Replace bisect's Ray-submitting probe (setattr_: monkeypatch.setattr, or builtins.setattr)."""
        from detrun.run import bisect

        setattr_(bisect, "_submit_probe", lambda req, data, store, axis: cls(req, data, store, trees, fake))

    def __call__(self, version, good):
        import yaml

        from detrun.errors import DetrunError
        from detrun.judge.baseline import verdict_of
        from detrun.paths import write_output
        from detrun.run import bisect
        from detrun.spec.versions import pin

        release = version.partition("==")[2]
        path = bisect.output_path(self.req.output, version)
        write_output(path, yaml.safe_dump(pin(self.data, [version]), sort_keys=False), "-o/--output")
        run_id = f"{self.data['name']}-{bisect.file_safe(version)}"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(self.trees[release]), str(REPO),
                                                           os.environ.get("PYTHONPATH", "")]))
        done = subprocess.run([sys.executable, "-m", "tests.sglang_release_run", str(path), self.req.runs_root, run_id,
                               *(["--fake"] if self.fake else [])], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=900)
        if done.returncode:
            sys.stderr.write(done.stderr[-4000:])
            raise DetrunError(f"{version}: the run failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        self.runs.append(run_id)
        return bisect.Probed.of(version, run_id, verdict_of(self.store, [run_id], self.req.claims.checks()))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--fake"]
    main(args[0], args[1], args[2], FAKE)
