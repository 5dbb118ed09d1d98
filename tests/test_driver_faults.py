"""A `detrun submit` subprocess with its own local Ray, killed: SIGKILL leaves a run `status` calls stale
(with the resume hint), Ctrl-C leaves no Ray process of its session behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.helpers import ROOT, small
from tests.procs import detrun, end_session, names, session_processes

pytestmark = pytest.mark.slow
HEARTBEAT_S = 1.0
# `python -m detrun.cli` with Python's own SIGINT handler, as a terminal's Ctrl-C finds it: a pytest started
# in the background of a non-interactive shell has SIGINT ignored, and the driver would inherit that.
WITH_SIGINT = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
               "sys.argv[0] = 'detrun'; runpy.run_module('detrun.cli', run_name='__main__')")


@pytest.fixture
def driver(tmp_path):
    """start(run_id): a `detrun submit` of a one-shard spec whose task sleeps 120 s, in its own session
    (its Ray's processes too; all of them are ended afterwards)."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(small(repeats=1, modes=["eager"], cases={"alone": ["target"]},
                                        env={"SGLANG_FLASHINFER_USE_PAGED": "1", "DETRUN_TEST_SLEEP_S": "120"})))
    env = dict(os.environ, RAY_AUTH_MODE="disabled", DETRUN_HEARTBEAT_S=str(HEARTBEAT_S))
    started = []

    def start(run_id: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", WITH_SIGINT, "submit", str(job), "--runs-root",
                                 str(tmp_path / "runs"), "--run-id", run_id, "--gpus", "1"], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        end_session(proc.pid)


def _until(what: str, check, proc: subprocess.Popen, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert proc.poll() is None, f"the driver exited {proc.returncode} before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.2)
    return found


def _manifest(tmp_path, run_id: str):
    path = tmp_path / "runs" / run_id / "manifest.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not there yet
        return None


def test_sigkilled_driver_leaves_a_stale_run_with_the_resume_hint(driver, tmp_path):
    proc = driver("dead")
    created = _until("manifest", lambda: _manifest(tmp_path, "dead"), proc)["driver"]["heartbeat_unix"]
    _until("heartbeat", lambda: _manifest(tmp_path, "dead")["driver"]["heartbeat_unix"] > created, proc)
    runs = str(tmp_path / "runs")
    alive = detrun("status", "dead", "--runs-root", runs, env=dict(os.environ))
    assert alive.returncode == 0 and alive.stdout.startswith("run dead: running, gpus=1, shards missing: 1")
    assert "finish it with" not in alive.stdout

    proc.kill()
    proc.wait()
    last = _manifest(tmp_path, "dead")["driver"]["heartbeat_unix"]
    time.sleep(max(0.0, last + 3 * HEARTBEAT_S + 0.5 - time.time()))
    res = detrun("status", "dead", "--runs-root", runs, env=dict(os.environ))
    assert res.returncode == 0, res.stderr
    assert re.fullmatch(r"run dead: stale \(no heartbeat for \d+ s; the driver is gone\), gpus=1, "
                        r"shards missing: 1 \(g0-r0-0\)", res.stdout.splitlines()[0]), res.stdout
    assert f"  finish it with: detrun submit --resume dead --runs-root {runs}" in res.stdout.splitlines()


def test_ctrl_c_leaves_no_ray_process_of_its_session(driver, tmp_path):
    proc = driver("intr")
    running = _until("running task", lambda: "ray::shard_task" in names(session_processes(proc.pid)), proc)
    assert running and {"gcs_server", "raylet"} <= set(names(session_processes(proc.pid)))

    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert session_processes(proc.pid) == {}  # raylet, GCS, dashboard agent and the task's worker: all gone
    manifest = _manifest(tmp_path, "intr")
    assert manifest["status"] == "incomplete"
    assert manifest["failures"] == ["interrupted (Ctrl-C) with 1 task(s) running"]
    assert "detrun: interrupted (Ctrl-C); run intr is marked incomplete; finish it with: detrun submit --resume intr" \
        in err
