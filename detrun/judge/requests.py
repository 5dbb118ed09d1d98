"""What the judging commands are asked: the claim options shared by submit, compare and report, and the
requests of compare, report and baseline. Frozen, torch- and ray-free; built by the CLI (detrun/cli.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from .claims import Checks, parse_expect


@dataclass(frozen=True)
class ClaimOptions:
    """--baseline, --require-baseline, --strict, --expect (as given) and --details."""

    baseline: bool = False
    require_baseline: bool = False
    strict: bool = False
    expect: Tuple[str, ...] = ()  # AXIS=LEVEL items, checked by checks()
    details: int = 3

    def checks(self) -> Checks:
        """The Checks these options ask for; a bad --expect item is a DetrunError naming it."""
        return Checks(self.baseline, self.require_baseline, self.strict, parse_expect(self.expect), self.details)


@dataclass(frozen=True)
class CompareRequest:
    """detrun compare (and the comparison that ends a submit)."""

    runs: Tuple[str, ...]  # run ids under runs_root, or run directories
    runs_root: str = "runs"
    claims: ClaimOptions = ClaimOptions()
    junit: Optional[str] = None  # also write JUnit XML here


@dataclass(frozen=True)
class ReportRequest:
    """detrun report: the HTML report of a comparison."""

    runs: Tuple[str, ...]
    output: str = "report.html"
    runs_root: str = "runs"
    claims: ClaimOptions = ClaimOptions()


@dataclass(frozen=True)
class BaselineRequest:
    """detrun baseline set RUN (run given) and baseline show (run None)."""

    runs_root: str = "runs"
    run: Optional[str] = None
    force: bool = False
