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


@pytest.mark.slow
def test_the_bench_runs_two_workers_per_gpu_against_a_run_with_one(tmp_path):
    """--workers-per-gpu 2 splits the repeats into two tasks that share the GPU slot; --reference reads the run
    made with one worker per GPU (the way before) and prints this run against it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    bench = [sys.executable, "bench/sweep_scale.py", *CPU_SIZE, "--runs-root", str(tmp_path)]
    one = subprocess.run(bench, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    assert "GPU steady: " in one.stdout and " cells of 1 task(s) in " in one.stdout  # one task: its steady window
    reference = one.stdout.split("\nrun ", 1)[1].split(":", 1)[0]
    two = subprocess.run([*bench, "--workers-per-gpu", "2", "--reference", reference], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    assert "4 cases x 2 modes x 4 repeats x 1 GPU(s) = 32 cells; verdict: REPRODUCIBLE (exit 0)" in two.stdout
    assert f"reference {reference}: cells/s " in two.stdout
    assert "time to verdict / kernel time: not here with 2 workers per GPU" in two.stdout  # events hold slices
    from detrun.store.runs import RunStore

    store = RunStore(str(tmp_path))
    run = two.stdout.split("\nrun ", 1)[1].split(":", 1)[0]
    assert store.manifest(run)["timings"]["workers_per_gpu"] == 2
    assert sorted(store.read_timings(run)) == ["g0-r0-1", "g0-r2-3"]  # repeats_per_task 4 / 2 workers
    keys = {r: sorted(store.read_rows([r]).column("key").to_pylist()) for r in (reference, run)}
    assert keys[run] == keys[reference]
