"""Judging: a Comparison under its claims (and the baseline context) made into the one Verdict (verdict.py).

judge(cmp, baseline) folds what compare found per request copy and axis into the request x axis table,
turns verdicts, mismatches, missing cells, rows that errored, audits and the baseline context into Findings
with a severity, claim results per axis, one exit code and one headline. Every presenter prints that Verdict
and nothing else, so nothing the exit code counts can be missing from any of them. A command judges once.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ExitCode
from ..record.keys import folded_request
from ..record.status import Status
from ..spec.levels import bound_of
from .claims import AXIS_NAMES
from .compare import AxisVerdict, Comparison, Mismatch
from .tolerance import Measured
from .verdict import (
    FAIL,
    FAILURE,
    INFO,
    KINDS,
    NOT_VERIFIED,
    REPRODUCIBLE,
    WARN,
    BaselineContext,
    Cell,
    ClaimResult,
    Finding,
    Verdict,
)

MODEL_DIFFERS = "model differs from SGLang"  # compare.model_differs' words, in a mismatch's label
RANK = {"n/a": 0, "equal": 1, "explained": 2, "differs": 3}


def collapse(verdicts: Sequence[AxisVerdict]) -> Dict[str, Dict[str, AxisVerdict]]:
    """request -> axis -> verdict, copies (name#i) folded into one row (name#*) with the worst verdict."""
    folded: Dict[Tuple[str, str], List[AxisVerdict]] = defaultdict(list)
    for v in verdicts:
        folded[(folded_request(v.request), v.axis)].append(v)
    rows: Dict[str, Dict[str, AxisVerdict]] = defaultdict(dict)
    for (name, axis), vs in folded.items():
        causes: Dict[str, str] = {}
        for v in vs:
            for why, example in v.causes.items():
                causes.setdefault(why, example)
        worst = max(vs, key=lambda v: RANK[v.status])  # the first of the worst
        rows[name][axis] = AxisVerdict(name, axis, worst.status, sum(v.groups for v in vs), sum(v.rows for v in vs),
                                       sum(v.differing_groups for v in vs), sum(v.explained_groups for v in vs),
                                       causes, _merged(v.measured for v in vs))
    return rows


def _merged(measured) -> Optional[Measured]:
    """Several verdicts' measured pairs as one (None: none measured)."""
    out: Optional[Measured] = None
    for m in measured:
        if m is not None:
            out = m if out is None else out.merge(m)
    return out


def _bound_fails(v: AxisVerdict) -> bool:
    """Under a bound: whether the request's differences break it (beyond it, without numbers, or not measured)."""
    return v.status in ("differs", "explained") and (v.measured is None or not v.measured.held)


def cell_of(v: AxisVerdict, level: str) -> Cell:
    """The cell of one request's verdict along one axis, claimed at level."""
    if v.status == "n/a":
        return Cell("n/a", "not compared", "n/a", v)
    if v.status == "equal":
        return Cell("equal", "equal", f"equal ({v.rows})", v)
    of = f"{v.differing_groups if v.status == 'differs' else v.explained_groups}/{v.groups}"
    if level == "ignore":
        state = "ignored" if v.status == "differs" else "explained"
        return Cell(state, f"{v.status} (ignored)", f"{v.status} {of} (ignored)", v)
    if bound_of(level) is not None:
        said = v.measured.summary() if v.measured is not None else "not measured"
        if _bound_fails(v):
            return Cell("breaks", f"breaks {level}", f"breaks {level} ({said})", v)
        return Cell("within", f"within {level}", f"within {level} ({said})", v)
    if level == "bitwise":
        return Cell("breaks", "breaks bitwise", f"breaks bitwise {v.differing_groups + v.explained_groups}/{v.groups}",
                    v)
    word = "unexplained" if v.status == "differs" else "explained"
    return Cell("breaks" if v.status == "differs" else "explained", word, f"{word} {of}", v)


def _mismatch_text(m: Mismatch) -> str:
    lines = [f"{m.label} across {m.axis}: {m.a} vs {m.b}"]
    lines += [f"  {name}: {stats.text()}" for name, stats in (("out", m.out), ("lse", m.lse)) if stats is not None]
    lines += [f"  {line}" for line in m.no_numbers + m.reference]
    lines.append(f"  why: {'; '.join(m.why)}")
    return "\n".join(lines)


def _requests(names: Sequence[str]) -> str:
    """"2 requests (a, b) differ" / "1 request (a) differs"."""
    shown = ", ".join(names[:4]) + (f", +{len(names) - 4} more" if len(names) > 4 else "")
    one = len(names) == 1
    return f"{len(names)} request{'' if one else 's'} ({shown}) differ{'s' if one else ''}"


def _claim_results(cmp: Comparison, rows: Dict[str, Dict[str, AxisVerdict]]) -> Tuple[ClaimResult, ...]:
    out = []
    for axis in AXIS_NAMES:
        level = cmp.claims.level(axis)
        verdicts = {request: cells[axis] for request, cells in rows.items()}
        differing = tuple(r for r, v in verdicts.items() if v.status == "differs")
        explained = tuple(r for r, v in verdicts.items() if v.status == "explained")
        causes: Dict[str, str] = {}
        for v in verdicts.values():
            for cause, example in v.causes.items():
                causes.setdefault(cause, example)
        groups = sum(v.groups for v in verdicts.values())
        bad = differing + (explained if level == "bitwise" else ())
        measured = None
        if bound_of(level) is not None:  # the numbers decide, not the explanations
            bad = tuple(r for r, v in verdicts.items() if _bound_fails(v))
            explained = tuple(r for r, v in verdicts.items() if v.status in ("differs", "explained") and r not in bad)
            differing, measured = bad, _merged(v.measured for v in verdicts.values())
        status = ("ignored" if level == "ignore" else "not compared" if not groups
                  else "broken" if bad else "held")
        if measured is None:
            out.append(ClaimResult(axis, level, status, groups, differing, explained, causes))
            continue
        worst = measured.worst if measured.pairs > measured.unmeasured else None
        out.append(ClaimResult(axis, level, status, groups, differing, explained, causes, measured.summary(), worst,
                               measured.pairs, measured.failing))
    return tuple(out)


def _per_request(cmp: Comparison, cells: Dict[str, Dict[str, Cell]]) -> List[Finding]:
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
            shown = examples[(request, axis)]
            if level == "bitwise":
                title += f" [breaks {axis} bitwise]"
            elif level == "ignore":
                title += f" [{axis} claimed ignore]"
            elif v.measured is not None:  # a bound: the worst pair first
                title += f" [{cell.word}: {v.measured.summary()}]"
                shown = [v.measured.example(axis), *shown]
            out.append(Finding(v.status, cell.severity, title, axis, request, causes, examples=tuple(shown)))
    return out


def _grouped(kind: str, sev: str, entries: Sequence[Tuple[str, str]], what: str) -> List[Finding]:
    """(key, reason) entries -> one finding per reason, with the keys as items."""
    by_reason: Dict[str, List[str]] = defaultdict(list)
    for key, reason in entries:
        by_reason[reason or "no reason recorded"].append(key)
    return [Finding(kind, sev, f"{len(keys)} {what}: {reason}", cause=reason, items=tuple(keys))
            for reason, keys in by_reason.items()]


def _lines(kind: str, lines: Sequence[str]) -> List[Finding]:
    """One failure per "key: what is wrong" line (a kernel or wiring audit's), the key as its item."""
    return [Finding(kind, FAIL, line, items=(line.split(": ", 1)[0],)) for line in lines]


def _claim_findings(cmp: Comparison, claims: Sequence[ClaimResult]) -> List[Finding]:
    """Broken claims, claims nothing checked, and nothing compared at all."""
    out: List[Finding] = []
    for c in claims:
        if c.status == "broken":
            bad = c.differing + (c.explained if c.level == "bitwise" else ())
            if c.measured:  # a bound: what was measured
                out.append(Finding("broken_claim", FAIL, f"{c.axis} claimed {c.level}, {_requests(bad)}: {c.measured}",
                                   c.axis, cause=c.measured, items=bad))
                continue
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
    return out


def _other_findings(cmp: Comparison, base: BaselineContext) -> List[Finding]:
    """Every finding that is not a claim's nor a (request, axis) difference, in display order."""
    out = [Finding("backend_changed", FAIL, line) for line in base.backend_changes]
    out += [Finding("missing", FAIL, f"missing cell {key}: no row was stored", items=(key,)) for key in cmp.missing]
    out += [Finding("duplicate", FAIL, f"duplicate rows for {key}", items=(key,)) for key in cmp.duplicates]
    out += _grouped("error", FAIL, cmp.errors, "rows errored")
    out += _lines("audit", cmp.audit)
    out += _lines("wiring", cmp.wiring)
    out += _grouped("model_differs", FAIL, [(f"{m.a} vs {m.b}", m.label.removeprefix("unexplained: "))
                                            for m in cmp.mismatches if MODEL_DIFFERS in m.label],
                    "row pairs of detrun's model and SGLang's own backend differ")
    # A warning on its own (equal bits need no explanation); any difference they take part in is unexplained.
    out += _grouped("plan_unknown", WARN, cmp.plan_unknown, "rows with a plan detrun cannot read")
    sev = FAIL if base.required else WARN
    out += [Finding("provisional_baseline", sev, line) for line in base.provisional]
    out += [Finding("no_baseline", sev, base.missing)] if base.missing else []
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


def _summary(claims: Sequence[ClaimResult], findings: Sequence[Finding], cmp: Comparison) -> Tuple[str, ...]:
    """The headline's parts after "LABEL (exit N)": what failed, what was explained, not checked or warned,
    which claims held, what ran and the audit's coverage."""
    parts = []
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
                 for c in claims if c.status == "held" and c.explained and not c.measured]
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
    held = [c.axis + (f" {c.level}" if c.level == "bitwise" or bound_of(c.level) else "")
            + (f" ({c.measured})" if c.measured else "") for c in claims if c.status == "held"]
    unchecked = [c.axis + (f" (claimed {c.level})" if cmp.claims.required(c.axis) or cmp.claims.strict else "")
                 for c in claims if c.status == "not compared"]
    parts.append("held: " + (", ".join(held) or "none")
                 + (f"; not compared: {', '.join(unchecked)}" if unchecked else ""))
    if cmp.backends:
        profiles = f" ({', '.join(cmp.profiles)})" if cmp.profiles else ""
        parts.append("ran: " + ", ".join(cmp.backends) + profiles)
    if cmp.audit_groups:
        parts.append(f"audit {cmp.audit_groups - len(cmp.unaudited)}/{cmp.audit_groups} plans")
    return tuple(parts)


def _max_ulp(cmp: Comparison, requests: Sequence[str]) -> Dict[str, int]:
    """request (copies folded) -> the largest ULP distance among its recorded mismatches (0: none)."""
    worst = dict.fromkeys(requests, 0)
    for m in cmp.mismatches:
        name = folded_request(m.request)
        worst[name] = max([worst.get(name, 0), *(s.max_ulp for s in (m.out, m.lse) if s is not None)])
    for v in cmp.verdicts:  # a ulp bound measured every differing pair's output
        if v.measured is not None and v.measured.bound.kind == "ulp" and v.measured.pairs > v.measured.unmeasured:
            name = folded_request(v.request)
            worst[name] = max(worst.get(name, 0), int(v.measured.worst))
    return worst


def judge(cmp: Comparison, baseline: BaselineContext = BaselineContext()) -> Verdict:
    """The Verdict of a comparison under its claims and, with --baseline, its baseline context."""
    rows = collapse(cmp.verdicts)
    cells = {request: {axis: cell_of(v, cmp.claims.level(axis)) for axis, v in row.items()}
             for request, row in rows.items()}
    claims = _claim_results(cmp, rows)
    findings = tuple(_claim_findings(cmp, claims) + _per_request(cmp, cells) + _other_findings(cmp, baseline))
    failing = {f.kind for f in findings if f.severity == FAIL}
    if not failing:
        label = REPRODUCIBLE
    elif failing <= {"nothing_compared", "unverified_claim"}:  # nothing failed; what had to be checked was not
        label = NOT_VERIFIED
    else:
        label = FAILURE
    return Verdict(tuple(cmp.runs), cmp.rows, claims, findings, cells,
                   ExitCode.MISMATCH if failing else ExitCode.OK, label, _summary(claims, findings, cmp),
                   baseline, cmp.environment, _max_ulp(cmp, list(cells)))
