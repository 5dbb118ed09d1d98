"""The driver's heartbeat: when a running run is stale, what `detrun status` says, and that the runner beats
once a period while it waits for GPUs and while tasks run (and no more often)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import types

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.run import faults, runner
from detrun.spec.model import spec_from_dict
from detrun.store import heartbeat
from detrun.store.runs import RunStore
from tests.helpers import run_inline, small

NOW = 1_000_000.0


def _manifest(age: float, host: str = "elsewhere", pid: int = 1, status: str = "running") -> dict:
    return {"status": status, "driver": {"host": host, "pid": pid, "heartbeat_unix": NOW - age, "period_s": 10.0}}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_after_three_silent_periods_of_a_driver_elsewhere():
    assert heartbeat.silent_for(_manifest(29), NOW) is None
    assert heartbeat.silent_for(_manifest(31), NOW) == 31
    assert heartbeat.run_state(_manifest(31), NOW) == "stale (no heartbeat for 31 s; the driver is gone)"
    assert heartbeat.run_state(_manifest(29), NOW) == "running"


def test_a_finished_run_or_one_without_a_driver_is_never_stale():
    assert heartbeat.run_state(_manifest(999, status="incomplete"), NOW) == "incomplete"
    assert heartbeat.silent_for({"status": "running"}, NOW) is None


def test_on_this_host_a_live_driver_is_slow_and_a_dead_one_is_gone():
    host = socket.gethostname()
    assert heartbeat.silent_for(_manifest(999, host, os.getpid()), NOW) is None
    assert heartbeat.silent_for(_manifest(999, host, _dead_pid()), NOW) == 999


def _running(store: RunStore, run_id: str, age: float) -> None:
    """A stored run made to look as if its driver (on another host) last beat `age` s ago."""
    manifest = store.manifest(run_id)
    manifest.update(status="running", driver=dict(heartbeat.driver_record(), host="elsewhere",
                                                  heartbeat_unix=time.time() - age))
    store.write_manifest(manifest)


def test_status_says_stale_with_the_resume_hint(store):
    run_inline(store, small(repeats=1, modes=["eager"]), "r1")
    _running(store, "r1", 1.0)
    res = CliRunner().invoke(app, ["status", "r1", "--runs-root", store.root])
    assert res.exit_code == 0 and res.stdout.startswith("run r1: running, gpus=1, shards missing: 0")
    assert "finish it with" not in res.stdout

    _running(store, "r1", 45.0)
    res = CliRunner().invoke(app, ["status", "r1", "--runs-root", store.root])
    assert res.exit_code == 0
    assert res.stdout.startswith("run r1: stale (no heartbeat for 45 s; the driver is gone), gpus=1")
    assert f"  finish it with: detrun submit --resume r1 --runs-root {store.root}\n" in res.stdout


@pytest.fixture
def beats(monkeypatch):
    """The heartbeats the runner writes: `at` their monotonic times, `wall` the wall-clock interval around
    the last one's write; `after(n)`, a test's hook, runs after the nth."""
    log = types.SimpleNamespace(at=[], wall=None, after=lambda n: None)
    write = RunStore.beat

    def beat(self, run_id):
        before = time.time()
        write(self, run_id)
        log.at.append(time.monotonic())
        log.wall = (before, time.time())
        log.after(len(log.at))

    monkeypatch.setattr(RunStore, "beat", beat)
    return log


class Enough(Exception):
    """Ends a run from the beats hook once it has shown what the test needs."""


def _periods(at):
    return [b - a for a, b in zip(at, at[1:])]


def test_beats_while_waiting_for_gpus(ray_2gpu, store, beats, monkeypatch):
    """3 GPUs asked of 2: the placement group is never placed; the driver beats while it waits. The wait
    ends at the third beat (the hook), not at a deadline, so a slow machine only makes it take longer."""
    monkeypatch.setenv("DETRUN_HEARTBEAT_S", "0.5")

    def third(n):
        if n == 3:
            raise Enough

    beats.after = third
    with pytest.raises(Enough):
        runner.submit(spec_from_dict(small(repeats=1, modes=["eager"])), store, 3, run_id="wait")
    assert len(beats.at) == 3 and min(_periods(beats.at)) >= 0.5, _periods(beats.at)
    manifest = store.manifest("wait")
    driver = manifest["driver"]
    assert (driver["host"], driver["pid"], driver["period_s"]) == (socket.gethostname(), os.getpid(), 0.5)
    assert beats.wall[0] <= driver["heartbeat_unix"] <= beats.wall[1]  # the last beat is in the manifest
    assert manifest["status"] == "incomplete"


def test_a_placement_group_that_is_never_placed_fails_after_the_timeout(ray_2gpu, store, monkeypatch):
    monkeypatch.setenv("DETRUN_PG_TIMEOUT_S", "1")
    with pytest.raises(DetrunError, match=r"^could not reserve 3 GPU\(s\) within 1 s$"):
        runner.submit(spec_from_dict(small(repeats=1, modes=["eager"])), store, 3, run_id="wait")
    assert store.manifest("wait")["status"] == "incomplete"


def test_beats_once_a_period_while_tasks_run(ray_2gpu, store, beats, monkeypatch, tmp_path):
    """The task runs until the driver has beaten twice (it waits for the file the second beat writes), so
    two beats and the period between them are seen however slow the machine; no beat comes sooner."""
    monkeypatch.setenv("DETRUN_HEARTBEAT_S", "1.5")  # the wait loop turns about once a second
    release = tmp_path / "release"
    beats.after = lambda n: n == 2 and release.touch()
    spec = spec_from_dict(small(repeats=1, modes=["eager"], env={"SGLANG_FLASHINFER_USE_PAGED": "1",
                                                                  faults.WAIT_FOR: str(release)}))
    result = runner.submit(spec, store, 1, run_id="beat")
    assert result.failures == [] and store.manifest("beat")["status"] == "complete"
    assert len(beats.at) >= 2 and min(_periods(beats.at)) >= 1.5, _periods(beats.at)
