"""The judging commands' files: detrun compare (and the end of a submit) with its --junit XML, and
detrun report's HTML. Each reads the runs, judges them once and writes the file; the terminal is the CLI's."""

from __future__ import annotations

from typing import Tuple

from ..judge.baseline import verdict_of
from ..judge.requests import CompareRequest, ReportRequest
from ..judge.verdict import Verdict
from ..store.runset import run_dirs
from .junit import write_junit
from .report import write_report


def compare(req: CompareRequest) -> Verdict:
    """The runs judged against the claims (or against the baseline); the JUnit XML written if asked."""
    checks = req.claims.checks()  # a bad --expect before a missing run
    store, ids = run_dirs(req.runs_root, req.runs)
    verdict = verdict_of(store, ids, checks)
    if req.junit is not None:  # written before anything is printed: a closed stdout must not lose it
        write_junit(verdict, req.junit, f"detrun {' '.join(ids)}")
    return verdict


def report(req: ReportRequest) -> Tuple[Tuple[str, ...], Verdict]:
    """The HTML report of the runs' verdict written to req.output; (the runs' labels, the verdict)."""
    checks = req.claims.checks()  # a bad --expect before a missing run
    store, ids = run_dirs(req.runs_root, req.runs)
    verdict = verdict_of(store, ids, checks)
    write_report(verdict, req.output, f"detrun report: {', '.join(ids)}")
    return tuple(ids), verdict
