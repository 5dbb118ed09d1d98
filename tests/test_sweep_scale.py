"""bench/jobs/sweep10k.yaml and bench/sweep_scale.py: the job is 10,000 cells of H200 sizes; --scale and
--length-scale shrink it; the bench runs it end to end on the CPU (reference backend) and prints its numbers."""

import importlib.util
import os
import subprocess
import sys

import pytest
import yaml

from detrun.spec.matrix import cells_for
from detrun.spec.model import load_spec, spec_from_dict
from tests.helpers import ROOT

JOB = ROOT / "bench" / "jobs" / "sweep10k.yaml"
CPU_SIZE = ["--scale", "0.01", "--length-scale", "0.01", "--set", "heads.qo=4", "--set", "heads.kv=2",
            "--set", "head_dim=32", "--set", "repeats=4", "--set", "repeats_per_task=4"]


def _bench():
    found = importlib.util.spec_from_file_location("sweep_scale", ROOT / "bench" / "sweep_scale.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_the_job_is_ten_thousand_cells_of_h200_sizes():
    spec = load_spec(JOB)
    assert len(list(cells_for(spec, tuple(range(spec.repeats))))) == 10_000
    assert (spec.heads.qo, spec.heads.kv, spec.head_dim, spec.dtype, spec.modes) == (
        32, 8, 128, "bf16", ["eager", "cudagraph"])
    assert not spec.store_tensors and spec.repeats_per_task == spec.repeats
    assert spec.flashinfer.profile_kernels and spec.flashinfer.profile_repeats == 1  # once per plan, as every job


def test_scaled_shrinks_the_cases_and_lengths():
    spec = spec_from_dict(_bench().scaled(yaml.safe_load(JOB.read_text()), 0.01, 0.01), str(JOB))
    assert len(spec.cases) == 4  # anchor_alone, mix_alone, mix0, chunk0
    assert max(r.qo_len for r in spec.requests.values()) <= 41 and max(
        r.prefix_len for r in spec.requests.values()) <= 164
    assert min(r.qo_len for r in spec.requests.values()) >= 1


@pytest.mark.slow
def test_the_bench_runs_the_sweep_on_the_cpu(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "bench/sweep_scale.py", *CPU_SIZE, "--runs-root", str(tmp_path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "4 cases x 2 modes x 4 repeats x 1 GPU(s) = 32 cells; verdict: REPRODUCIBLE (exit 0)" in out.stdout
    for shown in ("cells/s: ", "time to verdict: ", "compare: ", "steady state (", "task host RSS ", "driver RSS ",
                  "| cells | cells/s |", "\n| 32 | "):
        assert shown in out.stdout, shown
