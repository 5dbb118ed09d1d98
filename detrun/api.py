"""detrun's library face: one function per command, each taking that command's request object (re-exported
here) and returning a typed result; the CLI (detrun/cli.py) calls only this module and the presenters.

The functions gather the entry points of the parts (run: submit, shrink, bisect, status, logs, validate-cluster;
judge: compare, report, history, baseline; store: list, timings) and keep no logic of their own beyond
putting a command's steps in order. Messages go to the "detrun" logger (detrun/logs.py), never to print.
No torch or ray at import time: each function imports the part it calls."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, List, Optional, Tuple, Union

from .judge.requests import BaselineRequest, ClaimOptions, CompareRequest, ReportRequest
from .run.requests import BisectRequest, ShrinkRequest, SubmitRequest
from .store.requests import RunRequest, RunsRequest, TimingsRequest

if TYPE_CHECKING:
    from .errors import DetrunError
    from .judge.history import History
    from .judge.verdict import Verdict
    from .record.manifest import Manifest
    from .run.bisect import Bisected, Probed
    from .run.shrink import Shrunk, Step
    from .run.submission import Ran, RunStatus, Submitted, Versioned

__all__ = ["BaselineRequest", "BisectRequest", "ClaimOptions", "CompareRequest", "ReportRequest", "ShrinkRequest",
           "SubmitRequest", "RunRequest", "RunsRequest", "TimingsRequest", "submit", "compare", "report", "shrink",
           "bisect", "history", "baseline_set", "baseline_show", "list_runs", "timings", "status", "logs",
           "validate_cluster"]

_RESULTS = {"Submitted": "run.submission", "Ran": "run.submission", "Versioned": "run.submission",
            "RunStatus": "run.submission", "Shrunk": "run.shrink", "Step": "run.shrink", "Bisected": "run.bisect",
            "Probed": "run.bisect", "History": "judge.history", "Verdict": "judge.verdict"}


def __getattr__(name: str):
    """The result types, imported when first named (their parts import pyarrow)."""
    if name in _RESULTS:
        import importlib

        return getattr(importlib.import_module(f"detrun.{_RESULTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Progress = Callable[[str], ContextManager[Callable[[int, int], None]]]
Breakdown = Tuple[list, float, Optional[tuple]]


def check_settings() -> None:
    """The driver's DETRUN_* settings, read and checked (a bad value: DetrunError naming it, exit 2)."""
    from .envflags import driver_settings

    driver_settings()


def submit(req: SubmitRequest, progress: Optional[Progress] = None) -> Union["Submitted", "Ran", "Versioned"]:
    """detrun submit: a run here or on a Ray address (Ran: then compare(req.compare_request(run_id))), a job with
    versions: (Versioned: a run per environment, compared together), or a Ray job sent to a Jobs API (Submitted)."""
    from .run import submission

    return submission.submit(req, progress or submission.no_progress)


def compare(req: CompareRequest) -> "Verdict":
    """detrun compare: the runs judged once against the claims (or the baseline); the JUnit XML written if asked,
    before anything is printed (a closed stdout must not lose it)."""
    from .judge.baseline import verdict_of
    from .present.junit import write_junit
    from .store.runset import run_dirs

    checks = req.claims.checks()  # a bad --expect before a missing run
    store, ids = run_dirs(req.runs_root, req.runs)
    verdict = verdict_of(store, ids, checks)
    if req.junit is not None:
        write_junit(verdict, req.junit, f"detrun {' '.join(ids)}")
    return verdict


def report(req: ReportRequest) -> Tuple[Tuple[str, ...], "Verdict"]:
    """detrun report: the runs' verdict written as one HTML file to req.output; (the runs' labels, the verdict)."""
    from .judge.baseline import verdict_of
    from .present.report import write_report
    from .store.runset import run_dirs

    checks = req.claims.checks()  # a bad --expect before a missing run
    store, ids = run_dirs(req.runs_root, req.runs)
    verdict = verdict_of(store, ids, checks)
    write_report(verdict, req.output, f"detrun report: {', '.join(ids)}")
    return tuple(ids), verdict


def shrink(req: ShrinkRequest, on_step: Optional[Callable[["Step"], None]] = None) -> "Shrunk":
    """detrun shrink: the run's batch difference shrunk and written as a job spec to req.output."""
    from .run.shrink import shrink_run

    return shrink_run(req, on_step)


def bisect(req: BisectRequest, on_probe: Optional[Callable[["Probed"], None]] = None) -> "Bisected":
    """detrun bisect: the job run at versions of its versions: until the last that held and the first that broke
    are neighbours; what changed there, and the job pinned to the two written to req.output."""
    from .run.bisect import bisect_job

    return bisect_job(req, on_probe=on_probe)


def history(req: RunsRequest) -> "History":
    """detrun history: every run under the root, and where each case first differed."""
    from .judge.history import history_under

    return history_under(req)


def baseline_set(req: BaselineRequest) -> List[dict]:
    """detrun baseline set: req.run made the baseline of its spec per fingerprint; the baselines written."""
    from .judge import baseline

    return baseline.baseline_set(req)


def baseline_show(req: BaselineRequest) -> List[dict]:
    """detrun baseline show: every baseline under the root."""
    from .judge import baseline

    return baseline.baseline_show(req)


def list_runs(req: RunsRequest) -> Iterator[Tuple[str, Union["Manifest", "DetrunError"]]]:
    """detrun list: each run under the root with its manifest (or why it cannot be read)."""
    from .store.runs import runs_under

    return runs_under(req)


def timings(req: TimingsRequest) -> Tuple[Breakdown, List[str]]:
    """detrun timings: the stage breakdown (stages.run_breakdown: the stages that took time unless
    req.all_stages) and the lines below it: why there is no steady-state line (when there is none),
    peak memory, the JIT cache's transfers."""
    from .run.resources import no_steady_cells, run_lines
    from .stages import run_breakdown, took_time
    from .store.runs import RunStore

    store = RunStore(req.runs_root)
    rows, wall, steady = run_breakdown(store, req.run)
    manifest = store.manifest(req.run)
    why = [] if steady else [no_steady_cells(manifest["spec"], int(manifest["gpus"]))]
    return (rows if req.all_stages else took_time(rows), wall, steady), why + run_lines(store, req.run)


def status(req: RunRequest) -> "RunStatus":
    """detrun status: a run's shards and failures, and its Ray job (RunStatus.job_state asks the Jobs API)."""
    from .run.submission import run_status

    return run_status(req)


def logs(req: RunRequest) -> str:
    """detrun logs: the driver logs of the Ray job that ran the run."""
    from .run.submission import job_logs_of

    return job_logs_of(req)


def validate_cluster(path: Path) -> dict:
    """detrun validate-cluster: a `ray up` cluster YAML checked offline; its config."""
    from .run.cluster import validate_cluster_yaml

    return validate_cluster_yaml(path)
