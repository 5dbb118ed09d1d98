"""The Verdict: what judging a comparison found, made once (findings.judge) and read by every presenter.

Frozen and typed: the request x axis table (Cell), the claims (ClaimResult), the findings (Finding), the
baseline context (BaselineContext), the exit code (ExitCode) and the headline's parts; plus what the HTML
report shows beside them (the environments of the rows, the largest ULP distance per request). Terminal,
JUnit, HTML, history and --format json read these and nothing else.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from ..errors import ExitCode
from .claims import AXIS_NAMES
from .compare import AxisVerdict

FAIL, WARN, INFO = "fail", "warn", "info"

# kind -> what a presenter calls it (in display order); a new kind is one line here (and its list in judge)
KINDS: Dict[str, str] = {
    "broken_claim": "broken claim",
    "nothing_compared": "nothing compared",
    "differs": "unexplained difference",
    "explained": "explained difference",
    "backend_changed": "backend changed against the baseline",
    "missing": "missing cell",
    "duplicate": "duplicate rows",
    "error": "rows that errored",
    "audit": "kernel audit failure",
    "wiring": "wiring audit failure (what SGLang planned, ran and its rule)",
    "model_differs": "model differs from SGLang",
    "plan_unknown": "plan unknown (a plan layout detrun cannot read)",
    "provisional_baseline": "provisional: no baseline for this fingerprint",
    "no_baseline": "no baseline",
    "not_audited": "not audited",
    "known_bug": "known bug",
    "known_bug_fixed": "known bug did not reproduce (fixed?)",
    "skipped": "skipped (not run)",
    "unverified_claim": "claim nothing checked",
    "incomplete_run": "run not complete",
    "note": "equal although plans differ",
}

# Warnings about rows that were compared (a known bug that ran fine, a plan detrun cannot read, a run left
# incomplete): said as warnings, never as "not checked". Every other warning is something not checked.
COMPARED_WARNINGS = ("known_bug_fixed", "plan_unknown", "incomplete_run")

# a cell's state -> what the legend calls it
CELL_STATES = {"breaks": "breaks a claim", "explained": "explained (not claimed bitwise)",
               "ignored": "differs (claimed ignore)", "within": "differs within the claimed bound", "equal": "equal",
               "n/a": "not compared"}

REPRODUCIBLE, FAILURE, NOT_VERIFIED = "REPRODUCIBLE", "DETERMINISM FAILURE", "NOT VERIFIED"


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str  # fail | warn | info
    title: str  # one line
    axis: str = ""
    request: str = ""
    cause: str = ""  # what the difference is explained by, or the reason a cell did not run
    items: Tuple[str, ...] = ()  # cells or keys involved
    examples: Tuple[str, ...] = ()  # recorded mismatches with their numbers (lines)

    @property
    def label(self) -> str:
        return KINDS[self.kind]

    @property
    def detail(self) -> str:
        return "\n".join(self.examples)

    @property
    def tag(self) -> str:
        """What it does to the verdict: a failure | not checked | a warning (on compared rows) | noted."""
        if self.severity == WARN:
            return "a warning" if self.kind in COMPARED_WARNINGS else "not checked"
        return "a failure" if self.severity == FAIL else "noted"


@dataclass(frozen=True)
class Cell:
    """One request x axis as every presenter shows it: its state (the colour) and its words, from the
    axis' verdict under the axis' claim. breaks: its difference fails the claim (red); explained or
    ignored: a difference that counts for nothing (yellow); within: a difference inside the claimed bound
    (light green); equal (green); n/a: not compared (grey)."""

    state: str  # equal | explained | ignored | within | breaks | n/a
    word: str  # what it is: "breaks bitwise", "unexplained" (breaks explained), "within ulp:4", "equal", ...
    text: str  # the word and its count: "equal (8)", "breaks bitwise 2/4", "differs 1/2 (ignored)"
    verdict: AxisVerdict  # the request's (copies folded) groups along the axis

    @property
    def severity(self) -> str:
        return FAIL if self.state == "breaks" else INFO


@dataclass(frozen=True)
class ClaimResult:
    axis: str
    level: str  # bitwise | explained | ignore | a bound: ulp:N, abs:X, rel:X
    status: str  # held | broken | not compared | ignored
    groups: int = 0
    differing: Tuple[str, ...] = ()  # requests with an unexplained difference (a bound: beyond it, or unmeasured)
    explained: Tuple[str, ...] = ()  # requests whose differences plans/environments explain (a bound: within it)
    causes: Mapping[str, str] = field(default_factory=dict)  # cause -> first example of its values
    measured: str = ""  # a bound: "max 2 ULP", "max 9 ULP > 4 in 1/3 pairs", pairs without numbers
    worst: Optional[float] = None  # a bound: the largest value measured (its unit), None: no pair measured
    pairs: int = 0  # a bound: differing pairs measured (or that could not be)
    failing: int = 0  # a bound: of them, beyond it or without numbers

    def cause_text(self, values: bool = True) -> str:
        return ", ".join(f"{c} {v}" if values and v else c for c, v in self.causes.items())

    @property
    def text(self) -> str:
        """"batch ulp:4 held: max 2 ULP", "batch bitwise broken"."""
        return f"{self.axis} {self.level} {self.status}" + (f": {self.measured}" if self.measured else "")


@dataclass(frozen=True)
class BaselineContext:
    """What --baseline compared the run with (judge/baseline.py), and what that does to the verdict."""

    run: Optional[str] = None  # the baseline run compared against (None: none)
    lines: Tuple[str, ...] = ()  # per fingerprint: what was compared with what, or why not
    provisional: Tuple[str, ...] = ()  # nearest-fingerprint baselines, said as such
    missing: str = ""  # the spec has no baseline at all
    required: bool = False  # --require-baseline: a provisional or missing baseline fails
    backend_changes: Tuple[str, ...] = ()  # backend/attn/path changed against the baseline


@dataclass(frozen=True)
class Verdict:
    """A comparison judged against its claims (findings.judge)."""

    runs: Tuple[str, ...]
    rows: int
    claims: Tuple[ClaimResult, ...]  # one per axis, in AXIS_NAMES order
    findings: Tuple[Finding, ...]
    cells: Mapping[str, Mapping[str, Cell]]  # request -> axis -> cell (copies folded)
    exit_code: ExitCode
    label: str  # REPRODUCIBLE | DETERMINISM FAILURE | NOT VERIFIED
    summary: Tuple[str, ...]  # the headline's parts after "LABEL (exit N)"
    baseline: BaselineContext = BaselineContext()
    environment: Mapping[str, Mapping[str, object]] = field(default_factory=dict)  # fingerprint -> its fields
    max_ulp: Mapping[str, int] = field(default_factory=dict)  # request -> largest ULP distance recorded

    @property
    def headline(self) -> str:
        """The verdict line: "LABEL (exit N); part; part"."""
        return "; ".join([f"{self.label} (exit {int(self.exit_code)})", *self.summary])

    @property
    def failed(self) -> bool:
        return self.exit_code != ExitCode.OK

    def of(self, kind: str) -> List[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def counts(self) -> Dict[str, int]:
        """kind -> number of findings of that kind (only kinds present)."""
        return dict(Counter(f.kind for f in self.findings))

    def level(self, axis: str) -> str:
        """The level claimed along axis."""
        return next(c.level for c in self.claims if c.axis == axis)

    def describe_claims(self) -> str:
        """"repeat explained, gpu explained, ..." in axis order."""
        return ", ".join(f"{a} {self.level(a)}" for a in AXIS_NAMES)
