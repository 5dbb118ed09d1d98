"""What the running commands are asked: detrun submit and detrun shrink. Frozen, torch- and ray-free;
built by the CLI (detrun/cli.py), and for a Jobs API submission also by submission.py (the job's own
request, which its argv rebuilds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ..judge.requests import ClaimOptions, CompareRequest


@dataclass(frozen=True)
class SubmitRequest:
    """detrun submit: a job spec (or --resume RUN) run here, on a Ray address, or as a Ray job (http://)."""

    spec_path: Optional[str] = None  # the job spec; exactly one of spec_path and resume
    gpus: str = "all"  # "all" or a positive number, as given
    address: Optional[str] = None
    accelerator_type: Optional[str] = None
    task_timeout: Optional[float] = None
    resume: Optional[str] = None
    working_dir: Optional[str] = None  # with an http:// address: uploaded as the job's working_dir
    runs_root: str = "runs"
    run_id: Optional[str] = None
    overrides: Tuple[str, ...] = ()  # --set KEY.PATH=VALUE, in order
    claims: ClaimOptions = ClaimOptions()
    junit: Optional[str] = None
    jit_cache: bool = True
    verbose: bool = False  # Ray's own notices and the tasks' output on stderr (run/raylog.py)

    def compare_request(self, *run_ids: str) -> CompareRequest:
        """The comparison that ends the run (a job with versions: its runs, one per environment, together)."""
        return CompareRequest(run_ids, self.runs_root, self.claims, self.junit)


@dataclass(frozen=True)
class ShrinkRequest:
    """detrun shrink: RUN's first batch difference (or request's) shrunk and written as a job spec to output."""

    run: str
    output: str = "found.yaml"
    budget_cells: int = 200
    runs_root: str = "runs"
    inline: bool = False  # trials in this process, without Ray (the default without address)
    address: Optional[str] = None  # the Ray the trials run on (local: start one); None: in this process
    request: Optional[str] = None  # the request to follow (default: the first that differs)
    verbose: bool = False  # Ray's own notices on stderr (run/raylog.py)


@dataclass(frozen=True)
class BisectRequest:
    """detrun bisect: the job run pinned to one version of its versions: at a time, searched for the first that
    breaks a claim; the job that reproduces it written to output."""

    spec_path: str
    versions: Tuple[str, ...] = ()  # the ordered range (names or bare versions); none: the job's own list
    output: str = "bisected.yaml"  # the job pinned to the last good and first bad versions
    gpus: str = "all"
    address: Optional[str] = None  # the Ray the runs use (not a Jobs API: bisect waits for each run)
    runs_root: str = "runs"
    overrides: Tuple[str, ...] = ()  # --set KEY.PATH=VALUE, applied to the job before pinning
    claims: ClaimOptions = ClaimOptions()
    expect_break: bool = True  # a range whose both endpoints hold is exit 2 (False: exit 0, nothing broke)
    jit_cache: bool = True
    verbose: bool = False
