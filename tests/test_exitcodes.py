"""The exit-code policy (0/1/2/3/130) through main() and `python -m detrun.cli`; bad input is one line, exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError, Terminated
from detrun.paths import write_output
from detrun.store.runs import RunStore
from tests.helpers import ROOT, flip_one_ulp, job_file, run_inline, small
from tests.helpers import cli_main as _main
from tests.helpers import one_line as _one_line

TINY = dict(modes=["eager"], repeats=2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs root with a reproducible run 'pass' and one with a flipped bit, 'fail'."""
    root = tmp_path_factory.mktemp("runs")
    store = RunStore(str(root))
    run_inline(store, small(**TINY), "pass")
    run_inline(store, small(**TINY), "fail")
    flip_one_ulp(store, "fail", lambda r: r["case"] == "alone" and r["repeat"] == 1)
    return str(root)


@pytest.fixture
def no_compare(monkeypatch):
    monkeypatch.setattr("detrun.judge.baseline.comparison", _must_not_run)


def _must_not_run(*args, **kwargs):
    raise AssertionError("reached a step the checks should have stopped before")


def _job(tmp_path, **overrides) -> str:
    return job_file(tmp_path, **dict(TINY, **overrides))


# -- the policy


def test_verdict_codes_pass_through(capsys, runs):
    assert _main(capsys, "compare", "pass", "--runs-root", runs)[0] == 0
    code, out, _ = _main(capsys, "compare", "fail", "--runs-root", runs)
    assert code == 1 and "DETERMINISM FAILURE" in out


def test_detrun_error_is_one_line_exit_2_under_main_and_clirunner(capsys, tmp_path):
    code, _, err = _main(capsys, "status", "nope", "--runs-root", str(tmp_path))
    assert code == 2 and _one_line(err).startswith("detrun: error: no run 'nope'")
    res = CliRunner().invoke(app, ["status", "nope", "--runs-root", str(tmp_path)])
    assert res.exit_code == 2 and _one_line(res.stderr).startswith("detrun: error: no run 'nope'")


@pytest.mark.parametrize("args, needle", [(["--bogus"], "No such option: --bogus"),
                                          (["compare"], "Missing argument"),
                                          (["submit", "--gpus"], "Option '--gpus' requires")])
def test_usage_errors_exit_2_with_clicks_message(capsys, args, needle):
    code, _, err = _main(capsys, *args)
    assert code == 2 and needle in err and "Error" in err


def _raise(exc):
    def fail(*args, **kwargs):
        raise exc

    return fail


def test_internal_error_is_one_line_exit_3(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("DETRUN_DEBUG", raising=False)
    monkeypatch.setattr(RunStore, "list_runs", _raise(RuntimeError("boom\nsecond line")))
    code, _, err = _main(capsys, "list", "--runs-root", str(tmp_path))
    assert code == 3
    assert _one_line(err) == "detrun: internal error: RuntimeError: boom (set DETRUN_DEBUG=1 for the traceback)"
    monkeypatch.setenv("DETRUN_DEBUG", "1")
    code, _, err = _main(capsys, "list", "--runs-root", str(tmp_path))
    assert code == 3 and err.startswith("Traceback (most recent call last):") and "in list_runs" in err
    assert err.splitlines()[-1] == "detrun: internal error: RuntimeError: boom"


def test_broken_pipe_not_on_stdout_is_an_internal_error(capsys, monkeypatch, tmp_path):
    """click would exit 1 on any BrokenPipeError; one from a socket is a crash, not a verdict."""
    monkeypatch.setattr(RunStore, "list_runs", _raise(BrokenPipeError(32, "Broken pipe")))
    code, _, err = _main(capsys, "list", "--runs-root", str(tmp_path))
    assert code == 3 and _one_line(err).startswith("detrun: internal error: BrokenPipeError:")


@pytest.mark.parametrize("exc, how", [(KeyboardInterrupt(), "Ctrl-C"), (Terminated(), "SIGTERM")])
def test_interruptions_exit_130(capsys, monkeypatch, tmp_path, exc, how):
    monkeypatch.setattr(RunStore, "list_runs", _raise(exc))
    code, _, err = _main(capsys, "list", "--runs-root", str(tmp_path))
    assert code == 130 and _one_line(err).startswith(f"detrun: interrupted ({how})")
    res = CliRunner().invoke(app, ["list", "--runs-root", str(tmp_path)])
    assert res.exit_code == 130 and f"interrupted ({how})" in res.stderr


def test_main_restores_the_sigterm_handler(capsys, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    _main(capsys, "list", "--runs-root", str(tmp_path))
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("reader", ["head -1", "true"])  # true never reads: the first write fails
@pytest.mark.parametrize("run, verdict", [("pass", 0), ("fail", 1)])
def test_closed_stdout_keeps_the_verdicts_code(runs, tmp_path, reader, run, verdict):
    junit = tmp_path / "junit.xml"
    script = f"{sys.executable} -m detrun.cli compare {run} --runs-root {runs} --junit {junit} " \
             f"| {reader} >/dev/null; " \
             "exit ${PIPESTATUS[0]}"
    res = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == verdict and res.stderr == ""
    assert (int(ET.parse(junit).getroot().get("failures")) > 0) == bool(verdict)  # written all the same


@pytest.mark.slow
def test_sigterm_marks_a_running_submit_incomplete(tmp_path):
    job = _job(tmp_path, repeats=1, env={"SGLANG_FLASHINFER_USE_PAGED": "1", "DETRUN_TEST_SLEEP_S": "120"})
    manifest = tmp_path / "runs" / "sig" / "manifest.json"
    proc = subprocess.Popen([sys.executable, "-m", "detrun.cli", "submit", job, "--runs-root",
                             str(tmp_path / "runs"), "--run-id", "sig", "--gpus", "1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not manifest.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(2)  # the task is sleeping in the test hook
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "detrun: interrupted (SIGTERM)" in err and "Traceback" not in err
    doc = json.loads(manifest.read_text())
    assert doc["status"] == "incomplete" and doc["failures"][-1].startswith("interrupted (SIGTERM) with ")


# -- output files: checked before the work, a failed write names the option


@pytest.mark.parametrize("kind", ["a directory", "under a file"])
@pytest.mark.parametrize("command, flag, option", [("compare", "--junit", "--junit"), ("report", "-o", "-o/--output")])
def test_unwritable_output_is_checked_before_comparing(capsys, tmp_path, runs, no_compare, kind, command, flag,
                                                       option):
    (tmp_path / "file").write_text("")
    target = tmp_path if kind == "a directory" else tmp_path / "file" / "out.xml"
    code, _, err = _main(capsys, command, "pass", "--runs-root", runs, flag, str(target))
    assert code == 2 and _one_line(err).startswith(f"detrun: error: {option} {target}: ")


def test_unwritable_junit_is_checked_before_running(capsys, tmp_path, no_ray):
    target = tmp_path / "junit.xml"
    target.mkdir()
    code, _, err = _main(capsys, "submit", _job(tmp_path), "--junit", str(target), "--runs-root", str(tmp_path / "r"))
    assert code == 2 and f"--junit {target}: is a directory" in _one_line(err)
    assert not (tmp_path / "r").exists()


def test_failed_final_write_names_the_option(capsys, monkeypatch, tmp_path, runs):
    (tmp_path / "file").write_text("")
    with pytest.raises(DetrunError, match=r"^--junit .*/file/j.xml: cannot write it"):
        write_output(tmp_path / "file" / "j.xml", "x", "--junit")
    monkeypatch.setattr("detrun.exitpolicy.check_output_path", lambda *a: None)  # the write itself fails
    code, _, err = _main(capsys, "report", "pass", "--runs-root", runs, "-o", str(tmp_path / "file" / "r.html"))
    assert code == 2 and "-o/--output" in _one_line(err) and "cannot write it" in err


# -- bad input: one line naming the file or option, exit 2, nothing stored


def test_non_utf8_spec(capsys, tmp_path, no_ray):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    code, _, err = _main(capsys, "submit", str(bad), "--runs-root", str(tmp_path / "runs"))
    assert code == 2 and str(bad) in _one_line(err) and "not UTF-8" in err
    assert not (tmp_path / "runs").exists()


def test_set_value_that_is_not_yaml(capsys, tmp_path, no_ray):
    code, _, err = _main(capsys, "submit", _job(tmp_path), "--set", "name=[unclosed",
                         "--runs-root", str(tmp_path / "runs"))
    assert code == 2 and "--set 'name=[unclosed'" in _one_line(err)
    assert not (tmp_path / "runs").exists()


def test_runs_root_that_is_a_file(capsys, tmp_path, no_ray):
    root = tmp_path / "runs"
    root.write_text("not a directory")
    code, _, err = _main(capsys, "submit", _job(tmp_path), "--runs-root", str(root))
    assert code == 2 and _one_line(err).startswith(f"detrun: error: --runs-root {root}: ")
    assert "not a directory" in err and root.read_text() == "not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml", "runs"]


def test_read_only_runs_root(capsys, monkeypatch, tmp_path, no_ray):
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o555)
    if os.geteuid() == 0:  # root may write anyway: have os.access answer as for a normal user
        access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: access(p, mode) and os.path.abspath(p) != str(root))
    try:
        code, _, err = _main(capsys, "submit", _job(tmp_path), "--runs-root", str(root / "runs"))
    finally:
        root.chmod(0o755)
    assert code == 2 and _one_line(err).startswith(f"detrun: error: --runs-root {root / 'runs'}: ")
    assert "not writable" in err and list(root.iterdir()) == []


# -- the run's state: checked before Ray starts, nothing stored changes


def _stored(root) -> dict:
    """Every file under a runs root and its bytes."""
    from pathlib import Path

    return {str(p): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


@pytest.mark.parametrize("args, line", [
    ([], "detrun: error: no job spec given: pass one (e.g. detrun submit jobs/paged.yaml) or --resume RUN"),
    (["JOB", "--resume", "r1"], "detrun: error: a job spec (JOB) and --resume r1 given: pass one of them"),
])
def test_submit_says_what_is_missing_or_too_much(capsys, tmp_path, no_ray, args, line):
    job = _job(tmp_path)
    args = [job if a == "JOB" else a for a in args]
    code, _, err = _main(capsys, "submit", *args, "--runs-root", str(tmp_path / "r"))
    assert code == 2 and _one_line(err) == line.replace("JOB", job)


def test_run_id_that_exists_is_exit_2_before_ray(capsys, tmp_path, runs, no_ray):
    before = _stored(runs)
    code, _, err = _main(capsys, "submit", _job(tmp_path), "--run-id", "pass", "--runs-root", runs)
    assert code == 2 and _one_line(err) == f"detrun: error: --run-id pass: run pass already exists under {runs}"
    assert _stored(runs) == before


def test_resume_of_a_complete_run_is_exit_2_before_ray(capsys, runs, no_ray):
    before = _stored(runs)
    code, _, err = _main(capsys, "submit", "--resume", "pass", "--runs-root", runs)
    assert code == 2 and _one_line(err) == (f"detrun: error: --resume pass: run pass is complete, nothing to resume; "
                                            f"compare it with: detrun compare pass --runs-root {runs}")
    assert _stored(runs) == before  # not reopened


def test_resume_of_a_stale_run_with_every_shard_finishes_it_without_ray(capsys, tmp_path, no_ray):
    store = RunStore(str(tmp_path / "runs"))
    run_inline(store, small(**TINY), "dead")
    manifest = store.manifest("dead")
    store.write_manifest(dict(manifest, status="running"))  # its driver died after the last shard's write
    code, out, _ = _main(capsys, "submit", "--resume", "dead", "--runs-root", store.root)
    assert code == 0 and out.startswith("run dead: resumed: 0 shard(s) run")
    assert store.manifest("dead")["status"] == "complete" and len(store.manifest("dead")["resumed"]) == 1


def test_working_dir_without_a_jobs_address_is_exit_2(capsys, tmp_path, no_ray):
    code, _, err = _main(capsys, "submit", _job(tmp_path), "--working-dir", ".", "--runs-root", str(tmp_path / "r"))
    assert code == 2 and "--working-dir" in _one_line(err) and "http:// --address" in err
    assert not (tmp_path / "r").exists()


def test_ctrl_c_before_a_run_exists_claims_no_run(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("detrun.run.runner.connect", _raise(KeyboardInterrupt()))  # Ctrl-C while Ray starts
    code, _, err = _main(capsys, "submit", _job(tmp_path), "--runs-root", str(tmp_path / "r"))
    assert code == 130 and _one_line(err) == "detrun: interrupted (Ctrl-C)"
    assert not (tmp_path / "r").exists()


def test_an_interruption_that_marked_a_run_says_which(capsys, monkeypatch, tmp_path):
    from detrun.errors import mark_incomplete

    exc = KeyboardInterrupt()
    mark_incomplete(exc, "r1", "/runs")
    monkeypatch.setattr(RunStore, "list_runs", _raise(exc))
    code, _, err = _main(capsys, "list", "--runs-root", str(tmp_path))
    assert code == 130 and _one_line(err) == ("detrun: interrupted (Ctrl-C); run r1 is marked incomplete; finish it "
                                              "with: detrun submit --resume r1 --runs-root /runs")


@pytest.mark.parametrize("doc, needle", [
    ([], "a JSON list, not an object"),
    ({"spec": {}, "gpus": 1, "status": "complete"}, "field 'run_id' must be a str, got nothing"),
    ({"run_id": "r", "spec": [], "gpus": 1, "status": "complete"}, "field 'spec' must be a dict, got a list"),
    ({"run_id": "r", "spec": {}, "gpus": "2", "status": "complete"}, "field 'gpus' must be a int, got a str"),
    ({"run_id": "r", "spec": {}, "gpus": True, "status": "complete"}, "field 'gpus' must be a int, got a bool"),
    ({"run_id": "r", "spec": {}, "gpus": 1, "status": None}, "field 'status' must be a str, got a NoneType"),
])
def test_manifest_of_the_wrong_shape(capsys, tmp_path, doc, needle):
    path = tmp_path / "r" / "manifest.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    with pytest.raises(DetrunError, match="^" + str(path)):
        RunStore(str(tmp_path)).manifest("r")
    code, _, err = _main(capsys, "status", "r", "--runs-root", str(tmp_path))
    line = _one_line(err)
    assert code == 2 and str(path) in line and needle in line


def test_corrupt_submission_record(capsys, tmp_path):
    path = tmp_path / ".submissions" / "r.json"
    path.parent.mkdir()
    path.write_text('{"run_id": "r", "submission_ids": [')
    code, _, err = _main(capsys, "status", "r", "--runs-root", str(tmp_path))
    assert code == 2 and f"{path}: unreadable submission record" in _one_line(err)
