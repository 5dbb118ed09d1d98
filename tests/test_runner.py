"""The Ray path end to end, on one shared local Ray with 2 declared GPUs."""

import json
import os
import types

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.record.rows import SCHEMA
from detrun.run import runner
from detrun.spec.matrix import expected_keys, shard_keys, shards
from detrun.spec.model import spec_from_dict
from detrun.store.runs import RunStore
from tests.helpers import OK_ROW, ROW_IDENTITY, job_file, local_ray, not_plain, run_inline, small

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
        from detrun.envflags import TaskFlags

        return ReferenceBackend(spec_from_dict(small()), __import__("torch").device("cpu"),
                                flags=TaskFlags.parse(os.environ)).use_paged

    assert ray_2gpu.get(probe.options(runtime_env={"env_vars": {FLAG: "1"}}).remote()) is True

    @ray_2gpu.remote(num_gpus=1)
    def bare():
        return os.environ.get(FLAG)

    assert ray_2gpu.get(bare.remote()) is None


@pytest.fixture(scope="module")
def two_slots(tmp_path_factory):
    """One run of 2 repeats on both GPU slots, shared by the tests that only read it; `received`: the rows
    as the driver got them from each task (after ray.get, before they are written to Parquet, which would
    turn a torch type into a plain one)."""
    local_ray()
    store = RunStore(str(tmp_path_factory.mktemp("two_slots") / "runs"))
    received, write = {}, store.write_rows

    def keep(run_id, shard, rows):
        received[shard] = rows
        return write(run_id, shard, rows)

    store.write_rows = keep
    spec = spec_from_dict(small(modes=["eager"], repeats=2))
    result = runner.submit(spec, store, runner.connect(gpus=2))
    return types.SimpleNamespace(spec=spec, store=store, result=result, received=received)


def test_submit_on_two_gpu_slots_runs_a_fresh_worker_per_task_with_the_flag(two_slots):
    store, result = two_slots.store, two_slots.result
    assert not result.failures and result.notes == []  # backend reference: no auto note
    rows = store.read_rows([result.run_id]).to_pylist()
    assert {r["slot"] for r in rows} == {0, 1}
    assert len({r["pid"] for r in rows}) == 2  # one fresh worker per task
    assert all(json.loads(r["flags"])[FLAG] == "1" and r["use_paged"] for r in rows)
    assert all(r["path"] == "paged" and r["node_id"] for r in rows)
    cmp = compare_runs(store, [result.run_id])
    assert judge(cmp).exit_code == 0
    assert {v.status for v in cmp.verdicts if v.axis == "gpu"} == {"equal"}
    assert store.manifest(result.run_id)["status"] == "complete"


def test_rows_reach_the_driver_as_plain_values_with_the_schemas_keys(two_slots):
    """The rows each task handed the driver: plain values, the schema's columns, the shard's keys."""
    spec, received = two_slots.spec, two_slots.received
    assert not two_slots.result.failures and sorted(received) == sorted(s.shard_id for s in shards(spec, 2))
    for shard in shards(spec, 2):
        assert sorted(r["key"] for r in received[shard.shard_id]) == sorted(shard_keys(spec, shard))
    rows = [r for shard_rows in received.values() for r in shard_rows]
    assert sorted(r["key"] for r in rows) == sorted(expected_keys(spec, 2))
    assert all(ROW_IDENTITY | OK_ROW | {"node_id"} <= set(r) <= set(SCHEMA.names) for r in rows)
    assert {r["status"] for r in rows} == {"ok"}
    assert [bad for r in rows for bad in not_plain(r)] == []


def _job(tmp_path, **overrides):
    return job_file(tmp_path, modes=["eager"], repeats=2, **overrides)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """`detrun submit` (in process) of 2 repeats on one GPU slot, shared by the tests that only read it:
    (the CLI's result, the job's folder, the runs root)."""
    local_ray()
    folder = tmp_path_factory.mktemp("cli_run")
    root = folder / "runs"
    out = CliRunner().invoke(app, ["submit", _job(folder), "--runs-root", str(root), "--gpus", "1"])
    return out, folder, root


def test_cli_submit_passes_and_stores_parquet(cli_run):
    out, _, root = cli_run
    assert out.exit_code == 0, out.output
    assert "REPRODUCIBLE" in out.output
    blobs, run_dir = sorted(root.iterdir())  # the shared blobs beside the run
    assert blobs.name == "blobs" and list(blobs.glob("*/*.bin")) and not (run_dir / "blobs").exists()
    assert list((run_dir / "rows").glob("part-*.parquet"))
    again = CliRunner().invoke(app, ["compare", run_dir.name, "--runs-root", str(root)])
    assert again.exit_code == 0


def test_a_task_runs_at_the_niceness_it_is_given_not_rays(ray_2gpu):
    @ray_2gpu.remote(num_gpus=1)
    def niceness():
        return os.nice(0)

    spec = spec_from_dict(small())
    at = {n: ray_2gpu.get(niceness.options(runtime_env=runner.task_runtime_env(spec, n)).remote()) for n in (0, 7)}
    assert at == {0: 0, 7: 7}
    assert ray_2gpu.get(niceness.remote()) == 15  # Ray's own default, which the runner's tasks no longer get


def test_cli_canary_exits_1(ray_2gpu, tmp_path):
    job = _job(tmp_path, reference={"variant": "canary"})
    out = CliRunner().invoke(app, ["submit", job, "--runs-root", str(tmp_path / "runs"), "--gpus", "1"])
    assert out.exit_code == 1, out.output
    assert "DETERMINISM FAILURE" in out.output


def test_cli_too_many_gpus_exits_2(ray_2gpu, tmp_path):
    out = CliRunner().invoke(app, ["submit", _job(tmp_path), "--gpus", "3", "--runs-root", str(tmp_path)])
    assert out.exit_code == 2
    assert "has 2 alive GPU(s)" in out.output


def test_timings_stored_per_shard_and_printed(cli_run):
    out, _, root = cli_run
    root = str(root)
    assert out.exit_code == 0, out.output
    store = RunStore(root)
    (run_id,) = store.list_runs()
    shard_t = store.read_timings(run_id)
    assert sorted(shard_t) == ["g0-r0-1"]  # both repeats in one task
    for t in shard_t.values():  # 5 cases x 2 repeats, eager only; inputs built once per case
        assert t["stages"]["kernel"]["n"] == 10 and t["stages"]["inputs"]["n"] == 5
        assert t["driver"]["submitted_unix"] <= t["task_entered_unix"] <= t["returned_unix"]
        assert t["memory"]["host_peak_mb"] > 50  # torch alone is more (the task's ru_maxrss)
        # Ray started the worker at DETRUN_WORKER_NICENESS (unset: 0), not at Ray's 15; its steady cells ran on a CPU
        assert t["steady_host"]["niceness"] == 0 and 0 < t["steady_host"]["thread_cpu_s"]
    assert store.manifest(run_id)["timings"]["driver_peak_rss_mb"] > 50
    from detrun.stages import run_breakdown

    rows, wall, steady = run_breakdown(store, run_id)
    total = sum(s for _, s, _ in rows)
    # one slot: shards run in turn, so they add up to the wall
    assert 0.5 * wall <= total <= 1.05 * wall + 0.2, (rows, wall)
    cells, cell_s, parts = steady  # repeat 1 of each case ran after repeat 0 in the same task
    assert cells == 5 and 0 < parts["kernel"] < cell_s < wall and 0 < parts["digest"] < cell_s
    # the host's parts fit in the cell; with the kernel they may not (host work overlaps it: steady_line)
    assert sum(s for name, s in parts.items() if name != "kernel") <= cell_s
    shown = CliRunner().invoke(app, ["timings", run_id, "--runs-root", root])
    assert shown.exit_code == 0 and "kernel" in shown.output and "import torch + detrun" in shown.output
    assert "steady state (5 cells" in shown.output
    assert "host in the steady cells: the cells' thread on a CPU" in shown.output and "niceness 0)" in shown.output
    assert "peak memory (largest of 1 tasks): task host RSS " in shown.output and ", driver RSS " in shown.output


def test_timings_of_a_run_without_them_exits_2(store):
    run_inline(store, small(modes=["eager"], repeats=1), "old")
    out = CliRunner().invoke(app, ["timings", "old", "--runs-root", store.root])
    assert out.exit_code == 2 and "recorded no timings" in out.output
