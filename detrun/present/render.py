"""Terminal output (rich) of `detrun compare` (a Verdict: its line, claims, findings, the request x axis
table), `detrun history` (a History) and `detrun timings` (the stage table and the steady-state line)."""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..judge.claims import CROSS_RUN
from ..judge.history import History
from ..judge.verdict import FAIL, FAILURE, INFO, KINDS, NOT_VERIFIED, REPRODUCIBLE, WARN, Cell, Finding, Verdict
from ..stages import BESIDE, GC_PAUSE

_STYLE = {"equal": "green", "explained": "yellow", "ignored": "yellow", "within": "green", "breaks": "bold red",
          "n/a": "dim"}
_SEVERITY = {FAIL: "bold red", WARN: "yellow", INFO: "cyan"}
_VERDICT = {REPRODUCIBLE: "bold green", FAILURE: "bold red", NOT_VERIFIED: "bold red"}
_CLAIM = {"held": "green", "broken": "bold red", "not compared": "dim", "ignored": "dim"}
_LIST_MAX = 10
_GROUPED = ("differs", "explained")


def _cell(cell: Cell) -> str:
    return f"[{_STYLE[cell.state]}]{escape(cell.text)}[/]"


def _listing(console: Console, title: str, items, style: str, limit: int = _LIST_MAX) -> None:
    if not items:
        return
    console.print(f"[{style}]{title}: {len(items)}[/]")
    for item in items[:limit]:
        console.print(f"  {item}", soft_wrap=True)
    if len(items) > limit:
        console.print(f"  ... and {len(items) - limit} more (--details N lists more)")


def verdict_line(verdict: Verdict) -> str:
    """"verdict: LABEL (exit N); part; part", the label coloured."""
    rest = "".join(f"; {part}" for part in verdict.summary)
    label = f"[{_VERDICT[verdict.label]}]{escape(verdict.label)}[/]"
    return f"verdict: {label} (exit {int(verdict.exit_code)}){escape(rest)}"


def _differences(console: Console, findings: Sequence[Finding], details: int) -> None:
    """Per-request differences grouped by (axis, kind, cause): counts first, then up to `details` examples."""
    groups: Dict[tuple, List[Finding]] = defaultdict(list)
    for f in findings:
        if f.kind in _GROUPED:
            groups[(f.axis, f.kind, f.cause, f.severity)].append(f)
    for (axis, kind, cause, sev), members in sorted(groups.items(), key=lambda g: (g[0][3] != FAIL, g[0][:3])):
        what = "unexplained" if kind == "differs" else f"explained by {cause}"
        _listing(console, f"{axis}: {what} ({sev}), requests", [escape(f.title) for f in members], _SEVERITY[sev],
                 max(details, _LIST_MAX))
        shown = [f for f in members if f.examples][:details]
        for f in shown:
            console.print(escape(f.examples[0]), soft_wrap=True)
        if details and len(members) > len(shown):
            console.print(f"  ({len(members) - len(shown)} more; --details N shows more)")


def print_comparison(verdict: Verdict, console: Console, details: int = 3) -> None:
    """Summary first: the verdict, the claims, differences by (axis, cause), every other finding; then
    the request x axis table, and the verdict again as the last line."""
    console.print(verdict_line(verdict), soft_wrap=True)
    console.print("claims: " + ", ".join(f"{c.axis} {c.level} [{_CLAIM[c.status]}]{c.status}[/]"
                                         + (f": {escape(c.measured)}" if c.measured else "")
                                         for c in verdict.claims), soft_wrap=True)
    for f in verdict.of("broken_claim") + verdict.of("nothing_compared") + verdict.of("unverified_claim"):
        console.print(f"[{_SEVERITY[f.severity]}]{f.label}[/]: {escape(f.title)}", soft_wrap=True)
    for line in verdict.baseline.lines:
        console.print(f"[cyan]baseline[/]: {escape(line)}", soft_wrap=True)
    _differences(console, verdict.findings, details)
    shown = set(_GROUPED) | {"broken_claim", "nothing_compared", "unverified_claim"}
    by_kind: Dict[str, List[Finding]] = defaultdict(list)
    for f in verdict.findings:
        if f.kind not in shown:
            by_kind[f.kind].append(f)
    for kind, members in by_kind.items():
        worst = min(members, key=lambda f: [FAIL, WARN, INFO].index(f.severity))
        _listing(console, f"{KINDS[kind]} ({worst.tag})", [escape(f.title) for f in members],
                 _SEVERITY[worst.severity], details if worst.severity == INFO else max(details, _LIST_MAX))
    table = Table(title=f"bitwise verdicts ({verdict.rows} rows, runs: {', '.join(verdict.runs)})")
    table.add_column("request")
    named = {f.axis for f in verdict.findings if f.axis}
    # a cross-run axis nothing met along and no finding names (one run's compare) has no column: the claims say it
    claims = [c for c in verdict.claims if c.axis not in CROSS_RUN or c.groups or c.axis in named]
    for c in claims:
        table.add_column(c.axis if c.level == "explained" else f"{c.axis} ({c.level})")
    for request, cells in verdict.cells.items():
        table.add_row(escape(request), *(_cell(cells[c.axis]) for c in claims))
    console.print(table)
    console.print(verdict_line(verdict), soft_wrap=True)


def print_history(hist: History, console: Console) -> None:
    console.print(f"history: {len(hist.runs)} runs, oldest first")
    for r in hist.runs:
        style = {"pass": "green", "FAIL": "bold red", "NOT VERIFIED": "bold red", "damaged": "bold red"}.get(
            r.verdict, "yellow")
        if r.verdict == "damaged":
            console.print(f"{r.index:>3}  {escape(r.run_id)}  {r.created[:19]}  {escape(r.spec)}  "
                          f"[{style}]damaged[/]: {escape(r.headline)}", soft_wrap=True)
            continue
        counts = " ".join(f"{k}={n}" for k, n in r.counts.items())
        ran = f"{','.join(r.fingerprints) or '-'}  {','.join(r.backends) or '-'}" + (
            f" versions={','.join(r.versions)}" if r.versions else "")
        console.print(f"{r.index:>3}  {escape(r.run_id)}  {r.created[:19]}  {escape(r.job)}  "
                      f"{escape(ran)}  [{style}]{r.verdict}[/]  rows={r.rows} ok={r.ok}"
                      + (f"  {escape(counts)}" if counts else ""), soft_wrap=True)
        for line in r.unverified:
            console.print(f"       [bold red]not verified[/]: {escape(line)}", soft_wrap=True)
        for line in r.bounds:
            console.print(f"       bound: {escape(line)}", soft_wrap=True)
    _listing(console, "cases whose bits changed (against earlier runs of the same job)",
             [escape(str(d)) for d in hist.drifts], "bold red")
    _listing(console, "known good -> broken -> fixed, per job", [escape(str(s)) for s in hist.stories], "bold red")


def print_timings(rows, wall: float, steady, console: Console) -> None:
    """Where a run's seconds went, stage by stage (sums over shards; one GPU runs them in turn), and the
    steady state: cells whose case, phase and mode ran before in their task."""
    table = Table(title=f"where the time went ({wall:.2f} s from placement group to the last shard)")
    for name in ("stage", "seconds", "share", "count"):
        table.add_column(name, justify="left" if name == "stage" else "right")
    # kernels and gc pauses overlap the host stages: shown below their sum
    total = sum(s for name, s, _ in rows if name not in BESIDE) or 1.0
    for name, seconds, count in rows:
        if name not in BESIDE:
            table.add_row(name, f"{seconds:.3f}", f"{100 * seconds / total:.1f}%", str(count))
    table.add_row("sum over shards", f"{total:.3f}", "100%", "")
    for name, seconds, count in rows:
        if name in BESIDE:
            table.add_row(f"[bold green]{name}[/]", f"{seconds:.3f}", f"{100 * seconds / total:.1f}%", str(count))
    console.print(table)
    if steady:
        console.print(steady_line(*steady))


def steady_overhead(cell_s: float, parts: dict) -> Optional[float]:
    """Steady cells' seconds over their kernel seconds, in percent (None: no kernel time recorded)."""
    kernel = parts.get("kernel", 0.0)
    return 100 * (cell_s - kernel) / kernel if kernel > 0 else None


def steady_line(cells: int, cell_s: float, parts: dict) -> str:
    """One cell in steady state: its wall, what it spent in kernels, plan() and digests, and the overhead."""
    ms = lambda s: f"{1e3 * s / cells:.3f} ms"  # noqa: E731
    summed = {name: s for name, s in parts.items() if name != GC_PAUSE}  # gc pauses run inside the others
    rest = cell_s - sum(summed.values())
    overhead = steady_overhead(cell_s, parts)
    over = f"{overhead:.1f}% of kernel time" if overhead is not None else "no kernel time recorded"
    split = ", ".join(f"{name} {ms(s)}" for name, s in summed.items())
    # The host's digest and row work runs while the kernel runs: then the parts add up to more than the cell.
    tail = f"rest {ms(rest)}" if rest >= 0 else f"of which {ms(-rest)} ran on the host during the kernel"
    if parts.get(GC_PAUSE):
        tail += f"; gc pauses {ms(parts[GC_PAUSE])} within those"
    return (f"steady state ({cells} cells whose case, phase and mode ran before in their task): "
            f"{ms(cell_s)} per cell ({split}, {tail}); overhead {over}")
