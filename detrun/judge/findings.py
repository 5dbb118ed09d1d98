"""One findings model: a Comparison judged against its claims, read by every presenter.

judge(cmp) turns what compare found (verdicts per request and axis, mismatches, missing cells, rows
that errored, audits, baseline context) into Findings with a severity, claim results per axis, one
exit code and one headline. Terminal, JUnit, HTML and history print these and nothing else, so
nothing the exit code counts can be missing from any of them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Tuple

from ..errors import EXIT_MISMATCH, EXIT_OK
from ..record.keys import folded_request
from ..record.status import Status
from .claims import AXIS_NAMES

if TYPE_CHECKING:
    from .compare import AxisVerdict, Comparison, Mismatch

FAIL, WARN, INFO = "fail", "warn", "info"
MODEL_DIFFERS = "model differs from SGLang"  # compare.model_differs' words, in a mismatch's label

# kind -> what a presenter calls it (in display order)
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


@dataclass
class Finding:
    kind: str
    severity: str  # fail | warn | info
    title: str  # one line
    axis: str = ""
    request: str = ""
    cause: str = ""  # what the difference is explained by, or the reason a cell did not run
    items: List[str] = field(default_factory=list)  # cells or keys involved
    examples: List[str] = field(default_factory=list)  # recorded mismatches with their numbers (lines)

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


@dataclass
class Cell:
    """One request x axis as every presenter shows it: its state (the colour) and its words, from the
    axis' verdict under the axis' claim. breaks: its difference fails the claim (red); explained or
    ignored: a difference that counts for nothing (yellow); equal (green); n/a: not compared (grey)."""

    state: str  # equal | explained | ignored | breaks | n/a
    word: str  # what it is: "breaks bitwise", "unexplained" (breaks explained), "explained", "equal", ...
    text: str  # the word and its count: "equal (8)", "breaks bitwise 2/4", "differs 1/2 (ignored)"
    verdict: "AxisVerdict"

    @property
    def severity(self) -> str:
        return FAIL if self.state == "breaks" else INFO


# a cell's state -> what the legend calls it
CELL_STATES = {"breaks": "breaks a claim", "explained": "explained (not claimed bitwise)",
               "ignored": "differs (claimed ignore)", "equal": "equal", "n/a": "not compared"}


def cell_of(v: "AxisVerdict", level: str) -> Cell:
    """The cell of one request's verdict along one axis, claimed at level."""
    if v.status == "n/a":
        return Cell("n/a", "not compared", "n/a", v)
    if v.status == "equal":
        return Cell("equal", "equal", f"equal ({v.rows})", v)
    of = f"{v.differing_groups if v.status == 'differs' else v.explained_groups}/{v.groups}"
    if level == "ignore":
        state = "ignored" if v.status == "differs" else "explained"
        return Cell(state, f"{v.status} (ignored)", f"{v.status} {of} (ignored)", v)
    if level == "bitwise":
        return Cell("breaks", "breaks bitwise", f"breaks bitwise {v.differing_groups + v.explained_groups}/{v.groups}",
                    v)
    word = "unexplained" if v.status == "differs" else "explained"
    return Cell("breaks" if v.status == "differs" else "explained", word, f"{word} {of}", v)


@dataclass
class ClaimResult:
    axis: str
    level: str  # bitwise | explained | ignore
    status: str  # held | broken | not compared | ignored
    groups: int = 0
    differing: List[str] = field(default_factory=list)  # requests with an unexplained difference
    explained: List[str] = field(default_factory=list)  # requests whose differences plans/environments explain
    causes: Dict[str, str] = field(default_factory=dict)  # cause -> first example of its values

    def cause_text(self, values: bool = True) -> str:
        return ", ".join(f"{c} {v}" if values and v else c for c, v in self.causes.items())


@dataclass
class Verdict:
    claims: List[ClaimResult]
    findings: List[Finding]
    exit_code: int
    label: str  # REPRODUCIBLE | DETERMINISM FAILURE | NOT VERIFIED
    headline: str
    cells: Dict[str, Dict[str, Cell]] = field(default_factory=dict)  # request -> axis -> cell (copies folded)

    @property
    def failed(self) -> bool:
        return self.exit_code != EXIT_OK

    def of(self, kind: str) -> List[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def counts(self) -> Dict[str, int]:
        """kind -> number of findings of that kind (only kinds present)."""
        return dict(Counter(f.kind for f in self.findings))


def _mismatch_text(m: "Mismatch") -> str:
    lines = [f"{m.label} across {m.axis}: {m.a} vs {m.b}"]
    lines += [f"  {name}: {stats}" for name, stats in (("out", m.out), ("lse", m.lse)) if stats is not None]
    lines += [f"  {line}" for line in m.no_numbers]
    lines.append(f"  why: {'; '.join(m.why)}")
    return "\n".join(lines)


def _requests(names: List[str]) -> str:
    """"2 requests (a, b) differ" / "1 request (a) differs"."""
    shown = ", ".join(names[:4]) + (f", +{len(names) - 4} more" if len(names) > 4 else "")
    one = len(names) == 1
    return f"{len(names)} request{'' if one else 's'} ({shown}) differ{'s' if one else ''}"


def _claim_results(cmp: "Comparison", rows: Dict[str, dict]) -> List[ClaimResult]:
    out = []
    for axis in AXIS_NAMES:
        level = cmp.claims.level(axis)
        res = ClaimResult(axis, level, "not compared")
        for request, cells in rows.items():
            v = cells[axis]
            res.groups += v.groups
            if v.status == "differs":
                res.differing.append(request)
            elif v.status == "explained":
                res.explained.append(request)
            for cause, example in v.causes.items():
                res.causes.setdefault(cause, example)
        bad = res.differing + (res.explained if level == "bitwise" else [])
        res.status = ("ignored" if level == "ignore" else "not compared" if not res.groups
                      else "broken" if bad else "held")
        out.append(res)
    return out


def _per_request(cmp: "Comparison", cells: Dict[str, Dict[str, Cell]]) -> List[Finding]:
    """One finding per (request, axis) that differs, with its recorded mismatches' numbers."""
    examples: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    for m in cmp.mismatches:
        examples[(folded_request(m.request), m.axis)].append(_mismatch_text(m))
    out = []
    for request, row in cells.items():
        for axis in AXIS_NAMES:
            cell, level = row[axis], cmp.claims.level(axis)
            v = cell.verdict
            if v.status not in ("differs", "explained"):
                continue
            causes = ", ".join(v.causes) or "unexplained"
            if v.status == "differs":
                title = f"{request} differs across {axis} ({v.differing_groups}/{v.groups} groups), unexplained"
            else:
                title = (f"{request} differs across {axis} ({v.explained_groups}/{v.groups} groups), "
                         f"explained by {causes}")
            if level == "bitwise":
                title += f" [breaks {axis} bitwise]"
            elif level == "ignore":
                title += f" [{axis} claimed ignore]"
            out.append(Finding(v.status, cell.severity, title, axis, request, causes,
                               examples=examples[(request, axis)]))
    return out


def _grouped(kind: str, sev: str, entries: List[Tuple[str, str]], what: str) -> List[Finding]:
    """(key, reason) entries -> one finding per reason, with the keys as items."""
    by_reason: Dict[str, List[str]] = defaultdict(list)
    for key, reason in entries:
        by_reason[reason or "no reason recorded"].append(key)
    return [Finding(kind, sev, f"{len(keys)} {what}: {reason}", cause=reason, items=keys)
            for reason, keys in by_reason.items()]


def _other_findings(cmp: "Comparison", claims: List[ClaimResult]) -> List[Finding]:
    out: List[Finding] = []
    for c in claims:
        if c.status == "broken":
            bad = c.differing + (c.explained if c.level == "bitwise" else [])
            why = c.cause_text() or "unexplained"
            out.append(Finding("broken_claim", FAIL, f"{c.axis} claimed {c.level}, {_requests(bad)} ({why})",
                               c.axis, cause=why, items=bad))
        elif c.status == "not compared" and (cmp.claims.required(c.axis) or cmp.claims.strict):
            # a claim the job states must be checked; one only --strict makes is a note where nothing can meet
            stated = cmp.claims.required(c.axis)
            why = cmp.uncompared.get(c.axis, "no pair of rows met along it")
            out.append(Finding("unverified_claim", FAIL if stated else WARN,
                               f"{c.axis} claimed {c.level}{'' if stated else ' (--strict)'}, but nothing was "
                               f"compared along {c.axis}: {why}", c.axis, cause=why))
    if not any(c.groups for c in claims if c.level != "ignore"):
        why = f"{cmp.rows} rows, {cmp.rows - len(cmp.not_run) - len(cmp.errors)} ran"
        out.append(Finding("nothing_compared", FAIL, f"no pair of rows was compared on any claimed axis ({why})"))
    out += [Finding("backend_changed", FAIL, line) for line in cmp.backend_changes]
    out += [Finding("missing", FAIL, f"missing cell {key}: no row was stored", items=[key]) for key in cmp.missing]
    out += [Finding("duplicate", FAIL, f"duplicate rows for {key}", items=[key]) for key in cmp.duplicates]
    out += _grouped("error", FAIL, cmp.errors, "rows errored")
    out += [Finding("audit", FAIL, line, items=[line.split(": ", 1)[0]]) for line in cmp.audit]
    out += [Finding("wiring", FAIL, line, items=[line.split(": ", 1)[0]]) for line in cmp.wiring]
    out += _grouped("model_differs", FAIL, [(f"{m.a} vs {m.b}", m.label.removeprefix("unexplained: "))
                                            for m in cmp.mismatches if MODEL_DIFFERS in m.label],
                    "row pairs of detrun's model and SGLang's own backend differ")
    # A warning on its own (equal bits need no explanation); any difference they take part in is unexplained.
    out += _grouped("plan_unknown", WARN, cmp.plan_unknown, "rows with a plan detrun cannot read")
    for line in cmp.provisional:
        out.append(Finding("provisional_baseline", FAIL if cmp.require_baseline else WARN, line))
    if cmp.no_baseline:
        out.append(Finding("no_baseline", FAIL if cmp.require_baseline else WARN, cmp.no_baseline))
    out += _grouped("not_audited", WARN, cmp.unaudited, "plans not audited")
    for status, kind in ((Status.KNOWN_BUG, "known_bug"), (Status.SKIPPED, "skipped")):
        rows = [(key, reason) for key, st, reason in cmp.not_run if st == status]
        out += _grouped(kind, WARN, rows, f"rows {status.replace('_', ' ')} (not a pass)")
    out += _grouped("known_bug_fixed", WARN, cmp.unreproduced, "rows ran although marked as a known bug")
    out += [Finding("incomplete_run", WARN, f"run {r} is not complete") for r in cmp.incomplete_runs]
    out += [Finding("note", INFO, n) for n in cmp.notes]
    return out


_COUNTED = {"missing": "missing cells", "duplicate": "duplicate rows", "error": "error rows",
            "audit": "kernel audit failures", "wiring": "wiring audit failures",
            "model_differs": "model-vs-SGLang differences"}


def _headline(label: str, code: int, claims: List[ClaimResult], findings: List[Finding],
              cmp: "Comparison") -> str:
    parts = [f"{label} (exit {code})"]
    for f in findings:
        if f.kind in ("broken_claim", "nothing_compared", "backend_changed") or (
                f.kind == "unverified_claim" and f.severity == FAIL):
            parts.append(f.title)
    counted: Counter = Counter()
    for f in findings:
        if f.severity == FAIL and f.kind in _COUNTED:
            counted[f.kind] += len(f.items) or 1
    parts += [f"{n} {_COUNTED[k]}" for k, n in counted.items()]
    parts += [f.title for f in findings if f.severity == FAIL and f.kind in ("provisional_baseline", "no_baseline")]
    explained = [f"{c.axis} {len(c.explained)} request{'s' * (len(c.explained) > 1)} ({c.cause_text(values=False)})"
                 for c in claims if c.status == "held" and c.explained]
    if explained:
        parts.append("explained: " + ", ".join(explained))
    warns = [f for f in findings if f.severity == WARN]
    for kind in ("provisional_baseline", "no_baseline"):
        parts += [f.title for f in warns if f.kind == kind]
    for tag, said in (("not checked", "not checked"), ("a warning", "warnings")):
        warned: Counter = Counter()
        for f in warns:
            if f.tag == tag and f.kind not in ("provisional_baseline", "no_baseline", "unverified_claim"):
                warned[f.kind] += len(f.items) or 1
        if warned:
            parts.append(f"{said}: " + ", ".join(f"{n} {KINDS[k]}" for k, n in warned.items()))
    held = [c.axis + (" bitwise" if c.level == "bitwise" else "") for c in claims if c.status == "held"]
    unchecked = [c.axis + (f" (claimed {c.level})" if cmp.claims.required(c.axis) or cmp.claims.strict else "")
                 for c in claims if c.status == "not compared"]
    parts.append("held: " + (", ".join(held) or "none")
                 + (f"; not compared: {', '.join(unchecked)}" if unchecked else ""))
    if cmp.backends:
        profiles = f" ({', '.join(cmp.profiles)})" if cmp.profiles else ""
        parts.append("ran: " + ", ".join(cmp.backends) + profiles)
    if cmp.audit_groups:
        parts.append(f"audit {cmp.audit_groups - len(cmp.unaudited)}/{cmp.audit_groups} plans")
    return "; ".join(parts)


def judge(cmp: "Comparison") -> Verdict:
    """The verdict of a comparison under its claims."""
    from .compare import collapse

    rows = collapse(cmp.verdicts)
    cells = {request: {axis: cell_of(v, cmp.claims.level(axis)) for axis, v in row.items()}
             for request, row in rows.items()}
    claims = _claim_results(cmp, rows)
    other = _other_findings(cmp, claims)
    first = ("broken_claim", "unverified_claim", "nothing_compared")
    findings = ([f for f in other if f.kind in first] + _per_request(cmp, cells)
                + [f for f in other if f.kind not in first])
    failing = {f.kind for f in findings if f.severity == FAIL}
    if not failing:
        label = "REPRODUCIBLE"
    elif failing <= {"nothing_compared", "unverified_claim"}:  # nothing failed; what had to be checked was not
        label = "NOT VERIFIED"
    else:
        label = "DETERMINISM FAILURE"
    code = EXIT_MISMATCH if failing else EXIT_OK
    return Verdict(claims, findings, code, label, _headline(label, code, claims, findings, cmp), cells)
