"""The Ray Jobs API for real: a local `ray start --head` with its dashboard on 127.0.0.1, `detrun submit
--address http://...` (the job runs `detrun submit --address auto` on that head), status, logs, compare;
a head with token auth refuses a wrong or a missing token in one line and takes the right one."""

from __future__ import annotations

import json
import os
import secrets
import time
import urllib.request

import pytest

from detrun.store.runs import RunStore
from tests.procs import RayHead, detrun

pytestmark = pytest.mark.slow
JOB_TIMEOUT_S = 180


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    return {**env, "RAY_AUTH_MODE": "disabled", **extra}


def _head(env: dict):
    head = RayHead(env)
    try:
        head.wait_ready()
        yield head
    finally:
        head.stop()


@pytest.fixture
def head():
    yield from _head(_env())


@pytest.fixture
def token_head():
    token = secrets.token_hex(16)
    for head in _head(_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)):
        head.token = token
        yield head


def _finished_job(run: str, runs: str, env: dict, head, token: str = "") -> str:
    """`detrun status RUN` once the run's job has ended (SUCCEEDED, FAILED or STOPPED). The wait polls the
    head's Jobs REST API from this process (a `detrun status` subprocess per poll took a CPU-second each,
    beside the job it waited for)."""
    url = f"{head.address}/api/jobs/detrun-{run}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        with urllib.request.urlopen(request, timeout=10) as answer:
            state = json.load(answer)["status"]
        if state in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        assert time.monotonic() < deadline, f"the job did not end within {JOB_TIMEOUT_S} s: {state}"
        time.sleep(1)
    res = detrun("status", run, "--runs-root", runs, env=env)
    assert res.returncode == 0, res.stderr
    assert f": {state}" in res.stdout, res.stdout
    return res.stdout


def _submit(address: str, runs: str, run: str, env: dict, *extra: str):
    return detrun("submit", "jobs/paged.yaml", "--address", address, "--working-dir", ".", "--runs-root", runs,
                  "--run-id", run, *extra, env=env)


def test_a_job_runs_on_the_cluster_and_status_logs_compare_read_it(head, tmp_path):
    runs, env = str(tmp_path / "runs"), _env()
    res = _submit(head.address, runs, "jobs1", env, "--set", "repeats_per_task=2")  # one task, not two in turn
    assert res.returncode == 0, res.stderr
    assert f"submitted job detrun-jobs1 for run jobs1 to {head.address}" in res.stdout

    status = _finished_job("jobs1", runs, env, head)
    logs = detrun("logs", "jobs1", "--runs-root", runs, env=env)
    assert f"job detrun-jobs1 at {head.address}: SUCCEEDED" in status, logs.stdout[-3000:]
    assert "run jobs1: complete, gpus=1, shards missing: 0" in status

    compared = detrun("compare", "jobs1", "--runs-root", runs, env=env)
    assert compared.returncode == 0, compared.stdout
    verdict = compared.stdout.splitlines()[0]
    assert verdict.startswith("verdict: REPRODUCIBLE (exit 0)")
    assert logs.returncode == 0 and logs.stdout.splitlines().count(verdict) == 2  # first and last, by the driver
    assert "--address auto" in logs.stdout  # the job's entrypoint joined this head

    manifest = json.loads((tmp_path / "runs" / "jobs1" / "manifest.json").read_text())
    assert (manifest["submission_id"], manifest["job_address"]) == ("detrun-jobs1", head.address)


def test_token_auth_refuses_a_wrong_or_missing_token_in_one_line(token_head, tmp_path):
    runs = str(tmp_path / "runs")
    refused = {"refused the token (invalid or incorrect)": _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 32),
               "requires authentication": _env()}
    for what, env in refused.items():
        res = _submit(token_head.address, runs, "tok", env)
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1, res.stderr
        assert res.stderr.startswith(f"detrun: error: the Ray Jobs API at {token_head.address} {what}: ")
        assert "RAY_AUTH_MODE=token" in res.stderr and "RAY_AUTH_TOKEN" in res.stderr
    assert RunStore(runs).submission("tok") is None  # nothing was submitted

    env = _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token_head.token)
    res = _submit(token_head.address, runs, "tok", env, "--set", "repeats=1")
    assert res.returncode == 0, res.stderr
    status = _finished_job("tok", runs, env, token_head, token_head.token)
    assert f"job detrun-tok at {token_head.address}: SUCCEEDED" in status and "run tok: complete" in status
    res = detrun("status", "tok", "--runs-root", runs, env=refused["requires authentication"])
    assert res.returncode == 2 and "requires authentication" in res.stderr
