"""The Jobs API seam (JobSubmissionClient mocked at detrun.run.jobs), status/logs, and corrupt Parquet. No Ray."""

from __future__ import annotations

import shlex
from pathlib import Path
from unittest import mock

import pytest
from ray.exceptions import AuthenticationError
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.run.runner import missing_shards
from detrun.store.runs import RunStore
from tests.helpers import ROOT, run_inline, small

ADDRESS = "http://head:8265"


@pytest.fixture
def client():
    with mock.patch("detrun.run.jobs.JobSubmissionClient") as cls:
        cls.return_value.submit_job.side_effect = lambda **kw: kw["submission_id"]
        yield cls


def _invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_http_address_submits_a_job_with_working_dir(client, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    runs = str(tmp_path / "runs")
    res = _invoke("submit", "jobs/paged.yaml", "--address", ADDRESS, "--runs-root", runs, "--run-id", "nightly",
                  "--working-dir", ".", "--gpus", "4", "--accelerator-type", "H100", "--task-timeout", "900")
    assert res.exit_code == 0, res.output
    client.assert_called_with(ADDRESS)
    kw = client.return_value.submit_job.call_args.kwargs
    assert shlex.split(kw["entrypoint"]) == [
        "python", "-m", "detrun.cli", "submit", "jobs/paged.yaml", "--run-id", "nightly", "--address", "auto",
        "--runs-root", runs, "--gpus", "4", "--accelerator-type", "H100", "--task-timeout", "900"]
    assert kw["submission_id"] == "detrun-nightly"
    assert kw["runtime_env"]["working_dir"] == "."
    assert kw["runtime_env"]["env_vars"] == {"DETRUN_SUBMISSION_ID": "detrun-nightly", "DETRUN_JOB_ADDRESS": ADDRESS}
    assert "RAY_AUTH_TOKEN" not in str(kw["runtime_env"])  # the token stays in this shell's environment
    assert RunStore(runs).submission("nightly")["submission_ids"] == ["detrun-nightly"]
    assert "detrun status nightly" in res.stdout


def test_installed_package_and_resume_submissions(client, store):
    run_inline(store, small(repeats=2, repeats_per_task=1), "r1")
    Path(store.row_files("r1")[1]).unlink()  # a shard to resume
    res = _invoke("submit", "--resume", "r1", "--address", ADDRESS, "--runs-root", store.root)
    assert res.exit_code == 0, res.output
    kw = client.return_value.submit_job.call_args.kwargs
    assert "working_dir" not in kw["runtime_env"]  # relies on the detrun installed on the cluster
    assert shlex.split(kw["entrypoint"])[3:7] == ["submit", "--resume", "r1", "--address"]
    assert kw["submission_id"].startswith("detrun-r1-resume-")


def test_resume_of_a_run_that_is_not_there_is_not_submitted(client, store):
    res = _invoke("submit", "--resume", "r1", "--address", ADDRESS, "--runs-root", store.root)
    assert res.exit_code == 2 and f"no run 'r1' under {store.root}" in res.stderr
    client.return_value.submit_job.assert_not_called()


def test_relative_runs_root_is_refused_for_jobs(client):
    res = _invoke("submit", str(ROOT / "jobs/paged.yaml"), "--address", ADDRESS)
    assert res.exit_code == 2 and "--runs-root" in res.stderr
    client.return_value.submit_job.assert_not_called()


def test_auth_required_is_one_line_naming_the_variables(client, tmp_path):
    client.side_effect = AuthenticationError("Missing authentication token")
    res = _invoke("submit", str(ROOT / "jobs/paged.yaml"), "--address", ADDRESS, "--runs-root", str(tmp_path))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "RAY_AUTH_MODE=token" in res.stderr and "RAY_AUTH_TOKEN" in res.stderr


def test_status_and_logs_of_a_submitted_run(client, store):
    run_inline(store, small(repeats=1), "r1")
    store.record_submission("r1", ADDRESS, "detrun-r1")
    info = client.return_value.get_job_info.return_value
    info.status, info.message = "SUCCEEDED", "Job finished successfully."
    client.return_value.get_job_logs.return_value = "driver says hi\n"

    res = _invoke("status", "r1", "--runs-root", store.root)
    assert res.exit_code == 0, res.output
    assert "run r1: complete" in res.stdout and "shards missing: 0" in res.stdout
    assert "job detrun-r1 at http://head:8265: SUCCEEDED: Job finished successfully." in res.stdout
    client.return_value.get_job_info.assert_called_with("detrun-r1")
    res = _invoke("logs", "r1", "--runs-root", store.root)
    assert res.exit_code == 0 and res.stdout == "driver says hi\n"


def test_logs_of_a_run_not_submitted_through_jobs(store):
    run_inline(store, small(repeats=1), "r1")
    res = _invoke("logs", "r1", "--runs-root", store.root)
    assert res.exit_code == 2 and "not submitted through the Ray Jobs API" in res.stderr


def test_truncated_parquet_is_named_and_resume_reruns_it(store):
    run_inline(store, small(repeats=2, repeats_per_task=1), "r1")
    victim = store.row_files("r1")[1]
    Path(victim).write_bytes(Path(victim).read_bytes()[:100])
    with pytest.raises(DetrunError, match=f"{victim}: corrupt or truncated Parquet"):
        store.read_rows(["r1"])
    res = _invoke("compare", "r1", "--runs-root", store.root)
    assert res.exit_code == 2 and victim in res.stderr
    _, missing = missing_shards(store, "r1")
    assert [f"part-{s.shard_id}.parquet" for s in missing] == [Path(victim).name]
    res = _invoke("status", "r1", "--runs-root", store.root)
    assert "shards missing: 1" in res.stdout and "detrun submit --resume r1" in res.stdout
