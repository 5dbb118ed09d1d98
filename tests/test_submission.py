"""Submission planning (detrun/run/submission.py), round trip: CLI args -> SubmitRequest (the CLI's own
parsing) -> the job's argv (plan_job) -> parsed again by the CLI -> the same request the job was planned
to run. No Ray: submission.submit is replaced by a capture, the Jobs API client by a mock."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from unittest import mock

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.judge.requests import ClaimOptions
from detrun.run import submission
from detrun.run.requests import SubmitRequest

ROOT = Path(__file__).resolve().parent.parent
ADDRESS = "http://head:8265"
SPEC = ROOT / "jobs" / "paged.yaml"


class _Captured(Exception):
    pass


@pytest.fixture
def parse(monkeypatch):
    """argv (from `submit` on) -> the SubmitRequest the CLI builds from it, nothing run."""
    def capture(req, progress=None):
        raise _Captured(req)

    monkeypatch.setattr(submission, "submit", capture)

    def parse(argv):
        res = CliRunner().invoke(app, list(argv))
        assert isinstance(res.exception, _Captured), res.output
        return res.exception.args[0]

    return parse


def _defaults(req) -> list:
    """The fields of req and of its ClaimOptions left at their default."""
    out = [f.name for f in dataclasses.fields(SubmitRequest) if getattr(req, f.name) == f.default]
    claims = req.claims
    return out + [f"claims.{f.name}" for f in dataclasses.fields(ClaimOptions) if getattr(claims, f.name) == f.default]


def _every_option(tmp_path) -> list:
    return ["submit", str(SPEC), "--gpus", "4", "--address", ADDRESS, "--accelerator-type", "H100",
            "--task-timeout", "1234567.5", "--working-dir", str(ROOT), "--runs-root", "/shared/runs",
            "--run-id", "nightly", "--set", "repeats=2", "--set", "modes=[eager]", "--baseline",
            "--require-baseline", "--strict", "--expect", "batch=bitwise", "--expect", "gpu=ignore",
            "--details", "5", "--junit", str(tmp_path / "out.xml"), "--no-jit-cache", "--verbose"]


def test_every_option_survives_the_job_argv(parse, tmp_path):
    req = parse(_every_option(tmp_path))
    assert _defaults(req) == ["resume"]  # a new SubmitRequest field must be given above (or fail here)
    assert req.overrides == ("repeats=2", "modes=[eager]") and req.claims.expect == ("batch=bitwise", "gpu=ignore")

    plan = submission.plan_job(req, req.run_id)
    # The job runs the same request, but joins the cluster itself and reads the spec inside its working_dir.
    assert plan.request == dataclasses.replace(req, address="auto", working_dir=None, spec_path="jobs/paged.yaml")
    assert (plan.address, plan.working_dir, plan.submission_id) == (ADDRESS, str(ROOT), "detrun-nightly")
    assert plan.argv[0] == "submit" and "1234567.5" in plan.argv  # not 1.23457e+06
    assert parse(plan.argv) == plan.request


def test_dropping_any_argument_changes_the_request(parse, tmp_path):
    """The equality above sees every option: without any one of them (and its value) the job would run
    another request."""
    plan = submission.plan_job(parse(_every_option(tmp_path)), "nightly")
    argv = plan.argv
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        takes_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        dropped = argv[:i] + argv[i + 1 + takes_value:]
        assert parse(dropped) != plan.request, f"{arg} dropped from the job's argv went unnoticed"


def test_resume_with_defaults_round_trips(parse):
    req = parse(["submit", "--resume", "r1", "--address", ADDRESS, "--runs-root", "s3://bucket/runs"])
    assert req == SubmitRequest(resume="r1", address=ADDRESS, runs_root="s3://bucket/runs")
    plan = submission.plan_job(req, "r1", now=0)
    assert plan.request == dataclasses.replace(req, address="auto")
    assert plan.argv[:3] == ["submit", "--resume", "r1"] and "--run-id" not in plan.argv
    assert plan.submission_id == "detrun-r1-resume-19700101T000000Z" and plan.working_dir is None
    assert parse(plan.argv) == plan.request


def test_paths_outside_the_working_dir_stay_and_expect_is_normalised(parse, tmp_path):
    req = parse(["submit", str(SPEC), "--address", ADDRESS, "--runs-root", str(tmp_path), "--working-dir",
                 str(tmp_path), "--expect", "batch=explained", "--expect", "batch=bitwise"])
    plan = submission.plan_job(req, "r2")
    assert plan.request.spec_path == str(SPEC) and plan.request.run_id == "r2"
    assert plan.request.claims.expect == ("batch=bitwise",)  # the last word per axis, as the job checks it
    assert parse(plan.argv) == plan.request


def test_the_entrypoint_submitted_is_the_planned_argv(tmp_path, monkeypatch):
    """Through the real CLI and library, the Jobs API client mocked: the entrypoint parses back to the plan."""
    monkeypatch.chdir(ROOT)
    args = ["submit", "jobs/paged.yaml", "--address", ADDRESS, "--runs-root", str(tmp_path), "--run-id", "n1",
            "--working-dir", ".", "--set", "repeats=2", "--strict", "--task-timeout", "90.5"]
    with mock.patch("detrun.run.jobs.JobSubmissionClient") as cls:
        cls.return_value.submit_job.side_effect = lambda **kw: kw["submission_id"]
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    entry = shlex.split(cls.return_value.submit_job.call_args.kwargs["entrypoint"])
    assert entry[:3] == ["python", "-m", "detrun.cli"]

    captured = []
    with mock.patch.object(submission, "submit", lambda req, progress=None: captured.append(req)):
        CliRunner().invoke(app, args)
        CliRunner().invoke(app, entry[3:])
    user, job = captured
    assert job == submission.plan_job(user, "n1").request
    assert job == dataclasses.replace(user, address="auto", working_dir=None)


@pytest.mark.parametrize("slots, devices, said", [
    (1, ("cpu:x86_64",), "run r: 1 CPU slot, 2.0 s"),
    (2, ("cpu:x86_64",), "run r: 2 CPU slots, 2.0 s"),
    (1, ("NVIDIA H200",), "run r: 1 GPU, 2.0 s"),
    (4, ("NVIDIA H100 80GB HBM3", "NVIDIA H200"), "run r: 4 GPUs, 2.0 s"),
    (2, ("NVIDIA H200", "cpu:x86_64"), "run r: 2 slots, 2.0 s"),  # a task without CUDA beside a GPU one
])
def test_a_run_says_what_it_ran_on(slots, devices, said):
    from detrun.present.lines import ran

    assert ran(submission.Ran("r", False, slots, 1, [], 2.0, "/runs/r", devices)).startswith(said)
