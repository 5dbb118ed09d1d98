"""What the commands that read one runs root are asked (list, history, status, logs, timings).
Frozen, torch- and ray-free; built by the CLI (detrun/cli.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class RunsRequest:
    """A question about every run under runs_root (detrun list, detrun history)."""

    runs_root: str = "runs"


@dataclass(frozen=True)
class RunRequest:
    """A question about one run (detrun status, logs, timings); address: the Jobs API (default: recorded)."""

    run: str
    runs_root: str = "runs"
    address: Optional[str] = None


@dataclass(frozen=True)
class TimingsRequest:
    """detrun timings: where a run's seconds went; every stage, or (the default) those that took time."""

    run: str
    runs_root: str = "runs"
    all_stages: bool = False
