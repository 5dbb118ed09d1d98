"""Ray's own output stays off the user's terminal unless asked for (-v), and then goes to stderr: stdout holds
detrun's output alone (detrun/run/raylog.py)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest
import yaml

from detrun.run import raylog
from tests.helpers import ROOT, small

RAYLET = {"lines": ["A worker died or was killed ... (1) the process was killed by the OOM killer"], "pid": "raylet",
          "is_err": False}  # what Ray's listener thread hands print_to_stdstream for a crashed task


@pytest.fixture
def ray_state(monkeypatch):
    """Ray's printer and its logger's level, restored after the test."""
    import ray._private.worker as ray_worker

    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)
    logger = logging.getLogger("ray")
    level, handlers = logger.level, list(logger.handlers)
    yield ray_worker
    logger.setLevel(level)
    logger.handlers[:] = handlers


def test_quiet_drops_the_raylets_messages_and_rays_warnings(ray_state, capsys):
    assert raylog.ray_output(False) is False  # log_to_driver: the tasks' output is not forwarded either
    ray_state.print_to_stdstream(dict(RAYLET), False)
    logging.getLogger("ray._private.authentication.authentication_token_setup").warning(
        "Token authentication is enabled for this Ray cluster.")
    logging.getLogger("ray._private.worker").error("Unhandled error (suppress with ...)")
    assert capsys.readouterr() == ("", "")


def test_verbose_puts_them_on_stderr(ray_state, capsys):
    assert raylog.ray_output(True) is True
    raylog.ray_output(True)  # twice: still one handler, one line per message
    ray_state.print_to_stdstream(dict(RAYLET), False)
    logging.getLogger("ray._private.authentication.authentication_token_setup").warning("Token authentication")
    out, err = capsys.readouterr()
    assert out == "" and "OOM killer" in err and err.count("Token authentication") == 1


@pytest.mark.slow
def test_a_local_submit_prints_only_detrun_on_stdout(tmp_path):
    """A crashing cell on a local Ray started by detrun, with Ray's token auth at its default: no Ray notice
    on either stream, and the run says what it ran on."""
    job = tmp_path / "crash.yaml"
    job.write_text(yaml.safe_dump(small(name="crashy", repeats=1, modes=["eager"],
                                        reference={"faults": {"mixed": "crash"}})))
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # conftest turns the notice off
    res = subprocess.run([sys.executable, "-m", "detrun.cli", "submit", str(job), "--gpus", "1", "--run-id", "c1",
                          "--runs-root", str(tmp_path / "runs")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=400)
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(r"run c1: 1 CPU slot, [\d.]+ s, stored under .*/runs/c1", lines[0]), res.stdout
    assert lines[1].startswith("verdict: DETERMINISM FAILURE (exit 1); 3 error rows")
    for text in (res.stdout, res.stderr):
        assert "(raylet)" not in text and "OOM killer" not in text and "Token authentication" not in text
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [
        ln for ln in res.stderr.splitlines() if ln.startswith("shard g0-r0-0: 5 cell(s) run alone")]
