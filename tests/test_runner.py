"""The Ray path end to end, on one shared local Ray with 2 declared GPUs."""

import json
import os

import pytest
import yaml
from typer.testing import CliRunner

from detrun.run import runner
from detrun.cli import app
from detrun.judge.compare import compare_runs
from detrun.spec.model import spec_from_dict
from detrun.store.runs import RunStore
from tests.helpers import small

FLAG = "SGLANG_FLASHINFER_USE_PAGED"


@pytest.fixture(autouse=True)
def no_flag_in_driver(monkeypatch):
    monkeypatch.delenv(FLAG, raising=False)


def test_flag_reaches_task_only_through_runtime_env(ray_2gpu):
    @ray_2gpu.remote(num_gpus=1)
    def probe():
        from detrun.kernels.backends.reference import ReferenceBackend

        seen = os.environ.get(FLAG)
        assert seen == "1", f"task saw {seen!r}"
        return ReferenceBackend(spec_from_dict(small()), __import__("torch").device("cpu")).use_paged

    assert ray_2gpu.get(probe.options(runtime_env={"env_vars": {FLAG: "1"}}).remote()) is True

    @ray_2gpu.remote(num_gpus=1)
    def bare():
        return os.environ.get(FLAG)

    assert ray_2gpu.get(bare.remote()) is None


def test_submit_two_gpu_slots(ray_2gpu, tmp_path):
    store = RunStore(str(tmp_path))
    slots = runner.connect(gpus=2)
    spec = spec_from_dict(small(modes=["eager"], repeats=2))
    result = runner.submit(spec, store, slots)
    assert not result.failures and result.notes == []  # backend reference: no auto note
    rows = store.read_rows([result.run_id]).to_pylist()
    assert {r["slot"] for r in rows} == {0, 1}
    assert len({r["pid"] for r in rows}) == 2  # one fresh worker per task
    assert all(json.loads(r["flags"])[FLAG] == "1" and r["use_paged"] for r in rows)
    assert all(r["path"] == "paged" and r["node_id"] for r in rows)
    cmp = compare_runs(store, [result.run_id])
    assert cmp.exit_code == 0
    assert {v.status for v in cmp.verdicts if v.axis == "gpu"} == {"equal"}
    assert store.manifest(result.run_id)["status"] == "complete"


def _job(tmp_path, **overrides):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(small(modes=["eager"], repeats=2, **overrides)))
    return str(path)


def test_cli_submit_passes_and_stores_parquet(ray_2gpu, tmp_path):
    out = CliRunner().invoke(app, ["submit", _job(tmp_path), "--runs-root", str(tmp_path / "runs")])
    assert out.exit_code == 0, out.output
    assert "REPRODUCIBLE" in out.output
    blobs, run_dir = sorted((tmp_path / "runs").iterdir())  # the shared blobs beside the run
    assert blobs.name == "blobs" and list(blobs.glob("*/*.bin")) and not (run_dir / "blobs").exists()
    assert list((run_dir / "rows").glob("part-*.parquet"))
    again = CliRunner().invoke(app, ["compare", run_dir.name, "--runs-root", str(tmp_path / "runs")])
    assert again.exit_code == 0


def test_cli_canary_exits_1(ray_2gpu, tmp_path):
    job = _job(tmp_path, reference={"variant": "canary"})
    out = CliRunner().invoke(app, ["submit", job, "--runs-root", str(tmp_path / "runs"), "--gpus", "1"])
    assert out.exit_code == 1, out.output
    assert "DETERMINISM FAILURE" in out.output


def test_cli_too_many_gpus_exits_2(ray_2gpu, tmp_path):
    out = CliRunner().invoke(app, ["submit", _job(tmp_path), "--gpus", "3", "--runs-root", str(tmp_path)])
    assert out.exit_code == 2
    assert "has 2 alive GPU(s)" in out.output


def test_timings_stored_per_shard_and_printed(ray_2gpu, tmp_path):
    root = str(tmp_path / "runs")
    out = CliRunner().invoke(app, ["submit", _job(tmp_path), "--runs-root", root, "--gpus", "1"])
    assert out.exit_code == 0, out.output
    store = RunStore(root)
    (run_id,) = store.list_runs()
    shard_t = store.read_timings(run_id)
    assert sorted(shard_t) == ["g0-r0-1"]  # both repeats in one task
    for t in shard_t.values():  # 5 cases x 2 repeats, eager only; inputs built once per case
        assert t["stages"]["kernel"]["n"] == 10 and t["stages"]["inputs"]["n"] == 5
        assert t["driver"]["submitted_unix"] <= t["task_entered_unix"] <= t["returned_unix"]
        assert t["memory"]["host_peak_mb"] > 50  # torch alone is more (the task's ru_maxrss)
    assert store.manifest(run_id)["timings"]["driver_peak_rss_mb"] > 50
    from detrun.stages import run_breakdown

    rows, wall, steady = run_breakdown(store, run_id)
    total = sum(s for _, s, _ in rows)
    assert 0.5 * wall <= total <= 1.05 * wall + 0.2, (rows, wall)  # one slot: shards run in turn, so they add up to the wall
    cells, cell_s, parts = steady  # repeat 1 of each case ran after repeat 0 in the same task
    assert cells == 5 and 0 < parts["kernel"] < cell_s < wall and 0 < parts["digest"] < cell_s
    assert sum(parts.values()) <= cell_s
    shown = CliRunner().invoke(app, ["timings", run_id, "--runs-root", root])
    assert shown.exit_code == 0 and "kernel" in shown.output and "import torch + detrun" in shown.output
    assert "steady state (5 cells" in shown.output
    assert "peak memory (largest of 1 tasks): task host RSS " in shown.output and ", driver RSS " in shown.output


def test_timings_of_a_run_without_them_exits_2(tmp_path):
    from tests.helpers import run_inline

    run_inline(RunStore(str(tmp_path)), small(modes=["eager"], repeats=1), "old")
    out = CliRunner().invoke(app, ["timings", "old", "--runs-root", str(tmp_path)])
    assert out.exit_code == 2 and "recorded no timings" in out.output
