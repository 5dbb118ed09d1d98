"""Input size limits (tokens per case, rows per run: exit 2 before Ray) and tasks killed by Ray's memory monitor
(error rows, no retry on a local Ray). No Ray started."""

from __future__ import annotations

import glob
import signal

import pytest
import ray

from detrun.errors import DetrunError
from detrun.judge.baseline import _same_spec
from detrun.run import runner
from detrun.spec.matrix import check_size, row_count, shard_keys, shards
from detrun.spec.model import load_spec, spec_from_dict
from detrun.store.runs import RunStore
from tests.helpers import ROOT, cli_error, job_file, run_inline, small

OOM_REASON = "killed by Ray's memory monitor (out of memory): "


# -- limits


@pytest.mark.parametrize("override, needle", [
    ("requests.target.qo_len=1000000000", "cases.alone: 1000000000 tokens"),
    ("repeats=1000000000", "rows on 1 GPU slot(s) exceed limits.max_rows (2000000)"),
])
def test_huge_inputs_exit_2_before_ray(capsys, tmp_path, no_ray, override, needle):
    code, line = cli_error(capsys, "submit", job_file(tmp_path), "--set", override,
                           "--runs-root", str(tmp_path / "runs"))
    assert code == 2 and needle in line and "limits.max_" in line
    assert not (tmp_path / "runs").exists()


def test_max_tokens_counts_prefix_and_copies():
    data = small(requests=dict(small()["requests"], decode={"qo_len": 1, "prefix_len": 9, "copies": 10}))
    spec = spec_from_dict(dict(data, limits={"max_tokens": 121}))  # mixed_decode: 21 + 10 x (1 + 9)
    assert spec.case_tokens("mixed_decode") == 121
    with pytest.raises(DetrunError, match=r"cases.mixed_decode: 121 tokens .* exceed limits.max_tokens \(120\)"):
        spec_from_dict(dict(data, limits={"max_tokens": 120}))


def test_limits_can_be_raised_with_set(tmp_path):
    job = job_file(tmp_path)
    spec = load_spec(job, ["requests.target.qo_len=2000000", "limits.max_tokens=3000000"])
    assert spec.case_tokens("alone") == 2_000_000
    with pytest.raises(DetrunError, match="--set limits.max_tokenz=1: limits.max_tokenz: not a key of limits"):
        load_spec(job, ["limits.max_tokenz=1"])


def test_max_rows_counts_gpu_slots(capsys, tmp_path, no_ray):
    spec = load_spec(job_file(tmp_path), ["repeats=50000"])  # 22 rows a repeat (copies counted) x 2 modes
    assert row_count(spec, 1) == 1_100_000
    check_size(spec, 1)
    with pytest.raises(DetrunError, match=r"4400000 rows on 4 GPU slot\(s\) exceed limits.max_rows"):
        check_size(spec, 4)
    code, line = cli_error(capsys, "submit", job_file(tmp_path), "--set", "repeats=50000", "--gpus", "4",
                       "--runs-root", str(tmp_path / "runs"))
    assert code == 2 and "limits.max_rows" in line and not (tmp_path / "runs").exists()


def test_runner_checks_rows_on_the_slots_ray_reported(tmp_path):
    """--gpus all: the count is known only after connect; runner.submit checks it before create_run."""
    store = RunStore(str(tmp_path))
    spec = spec_from_dict(small(repeats=50000))
    with pytest.raises(DetrunError, match="limits.max_rows"):
        runner.submit(spec, store, 4, run_id="big")
    assert store.list_runs() == [] and not (tmp_path / "big").exists()


SHIPPED_JOBS = sorted(glob.glob(str(ROOT / "jobs/*.yaml")) + glob.glob(str(ROOT / "bench/jobs/*.yaml")))


def test_the_glob_finds_the_shipped_jobs():
    """Checked apart: with no job found, the parametrized test below would not run at all (nothing to fail)."""
    assert len(SHIPPED_JOBS) >= 4 and str(ROOT / "jobs" / "paged.yaml") in SHIPPED_JOBS


@pytest.mark.parametrize("job", SHIPPED_JOBS)
def test_shipped_jobs_fit_the_default_limits(job):
    check_size(load_spec(job), 8)


def test_limits_are_no_spec_difference_for_the_baseline(store):
    old = small(repeats=1, modes=["eager"])
    run_inline(store, old, "new")
    spec = spec_from_dict(old).model_dump(mode="json")
    del spec["limits"]  # as a run from before limits recorded it
    store.create_run("old", spec, 1)
    _same_spec(store, "new", "old")
    store.create_run("other", dict(spec, repeats=2), 1)
    with pytest.raises(DetrunError, match=r"differs in: repeats\)"):
        _same_spec(store, "new", "other")


# -- Ray's memory monitor


def test_oom_killed_shard_becomes_error_rows(store, monkeypatch):
    spec = spec_from_dict(small(repeats=2, repeats_per_task=1))
    store.create_run("oom", spec.model_dump(mode="json"), 1)
    monkeypatch.setattr(runner.ray, "cluster_resources", lambda: {"CPU": 2.0})
    run = runner._ShardRun(spec, store, "oom", shards(spec, 1), 1, runner.RunOptions())
    victim = shards(spec, 1)[1]

    def killed(ref):
        raise ray.exceptions.OutOfMemoryError("Task was killed due to the node running low on memory.\n"
                                              "Memory on the node was 30.5GB / 31GB (0.98).")

    monkeypatch.setattr(runner.ray, "get", killed)
    run._collect(object(), victim, 0)
    rows = store.read_rows(["oom"]).to_pylist()
    assert sorted(r["key"] for r in rows) == sorted(shard_keys(spec, victim))
    reason = OOM_REASON + "Memory on the node was 30.5GB / 31GB (0.98)."
    assert {(r["status"], r["reason"], r["shard"], r["slot"], r["repeat"]) for r in rows} == {
        ("error", reason, victim.shard_id, 0, 1)}
    assert run.result.failures == [f"shard {victim.shard_id}: {reason}"] and run.result.shards_run == 0


def test_local_ray_fails_oom_killed_tasks_at_once(monkeypatch):
    calls = []
    monkeypatch.setattr(runner.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(runner.ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(runner, "alive_gpus", lambda accelerator_type=None: 2)
    assert runner.connect(gpus=2) == 2
    assert calls[-1]["_system_config"] == {"task_oom_retries": 0} and calls[-1]["address"] == "local"
    runner.connect("ray://head:10001")
    assert "_system_config" not in calls[-1]  # a cluster we join keeps its own settings


def test_connect_keeps_the_callers_sigterm_handler(monkeypatch):
    def ray_init(**kwargs):  # what ray.init does to a driver
        signal.signal(signal.SIGTERM, lambda *_: None)

    def ours(*_):
        pass

    monkeypatch.setattr(runner.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(runner.ray, "init", ray_init)
    monkeypatch.setattr(runner, "alive_gpus", lambda accelerator_type=None: 1)
    previous = signal.signal(signal.SIGTERM, ours)
    try:
        runner.connect(gpus=1)
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
