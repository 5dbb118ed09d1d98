"""The driver's heartbeat: when a running run is stale, what `detrun status` says, and that the runner beats
once a period while it waits for GPUs and while tasks run (and no more often)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.run import runner
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
    """The monotonic times of the heartbeats the runner writes."""
    times = []
    write = RunStore.beat
    monkeypatch.setattr(RunStore, "beat", lambda self, run_id: (times.append(time.monotonic()), write(self, run_id)))
    return times


def test_beats_while_waiting_for_gpus(ray_2gpu, store, beats, monkeypatch):
    monkeypatch.setenv("DETRUN_HEARTBEAT_S", "0.5")
    monkeypatch.setenv("DETRUN_PG_TIMEOUT_S", "2.5")
    with pytest.raises(DetrunError, match="could not reserve 3 GPU"):
        runner.submit(spec_from_dict(small(repeats=1, modes=["eager"])), store, 3, run_id="wait")
    assert len(beats) >= 3
    driver = store.manifest("wait")["driver"]
    assert (driver["host"], driver["pid"], driver["period_s"]) == (socket.gethostname(), os.getpid(), 0.5)
    assert driver["heartbeat_unix"] > time.time() - 1.5


def test_beats_once_a_period_while_tasks_run(ray_2gpu, store, beats, monkeypatch):
    monkeypatch.setenv("DETRUN_HEARTBEAT_S", "1.5")  # the wait loop turns about once a second
    spec = spec_from_dict(small(repeats=1, modes=["eager"], env={"SGLANG_FLASHINFER_USE_PAGED": "1",
                                                                  "DETRUN_TEST_SLEEP_S": "4"}))
    result = runner.submit(spec, store, 1, run_id="beat")
    assert result.failures == [] and store.manifest("beat")["status"] == "complete"
    assert len(beats) >= 1
    assert all(b - a >= 1.5 for a, b in zip(beats, beats[1:]))
