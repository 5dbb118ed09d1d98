"""The judging commands' files: detrun compare (and the end of a submit) with its --junit XML, and
detrun report's HTML. Each reads the runs, judges them and writes the file; the terminal is the CLI's."""

from __future__ import annotations

from typing import Tuple

from ..judge.baseline import comparison
from ..judge.compare import Comparison
from ..judge.requests import CompareRequest, ReportRequest
from ..store.runset import run_dirs
from .junit import write_junit
from .report import write_report


def compare(req: CompareRequest) -> Comparison:
    """The runs judged against the claims (or against the baseline); the JUnit XML written if asked."""
    checks = req.claims.checks()
    store, ids = run_dirs(req.runs_root, req.runs)
    cmp = comparison(store, ids, checks)
    if req.junit is not None:  # written before anything is printed: a closed stdout must not lose it
        write_junit(cmp, req.junit, f"detrun {' '.join(ids)}")
    return cmp


def report(req: ReportRequest) -> Tuple[Tuple[str, ...], Comparison]:
    """The HTML report of the runs' comparison written to req.output; (the runs' labels, the comparison)."""
    checks = req.claims.checks()
    store, ids = run_dirs(req.runs_root, req.runs)
    cmp = comparison(store, ids, checks)
    write_report(store, cmp, req.output, f"detrun report: {', '.join(ids)}")
    return tuple(ids), cmp
