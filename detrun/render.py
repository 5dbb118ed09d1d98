"""Terminal output of a Comparison (rich)."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.table import Table

from .compare import AXES, AxisVerdict, Comparison

_STYLE = {"equal": "green", "differs": "bold red", "n/a": "dim"}
_RANK = {"n/a": 0, "equal": 1, "differs": 2}
_LIST_MAX = 10
_MISMATCH_MAX = 12


def _collapse(verdicts):
    """One table row per request, copies (name#i) folded into one row with the worst verdict."""
    rows = defaultdict(dict)
    for v in verdicts:
        base, _, copy = v.request.partition("#")
        name = f"{base}#*" if copy else base
        cur = rows[name].get(v.axis)
        if cur is None:
            rows[name][v.axis] = AxisVerdict(name, v.axis, v.status, v.groups, v.rows, v.differing_groups)
            continue
        cur.groups += v.groups
        cur.rows += v.rows
        cur.differing_groups += v.differing_groups
        if _RANK[v.status] > _RANK[cur.status]:
            cur.status = v.status
    return rows


def _cell(v) -> str:
    if v.status == "n/a":
        return "[dim]n/a[/]"
    tail = f" {v.differing_groups}/{v.groups}" if v.status == "differs" else f" ({v.rows})"
    return f"[{_STYLE[v.status]}]{v.status}[/]{tail}"


def _listing(console: Console, title: str, items, style: str) -> None:
    if not items:
        return
    console.print(f"[{style}]{title}: {len(items)}[/]")
    for item in items[:_LIST_MAX]:
        console.print(f"  {item}")
    if len(items) > _LIST_MAX:
        console.print(f"  ... and {len(items) - _LIST_MAX} more")


def print_comparison(cmp: Comparison, console: Console) -> None:
    table = Table(title=f"bitwise verdicts ({cmp.rows} rows, runs: {', '.join(cmp.runs)})")
    table.add_column("request")
    for axis in AXES:
        table.add_column(axis)
    for request, cells in _collapse(cmp.verdicts).items():
        table.add_row(request, *(_cell(cells[a]) for a in AXES))
    console.print(table)
    for m in cmp.mismatches[:_MISMATCH_MAX]:
        console.print(f"[red]differs[/] across {m.axis}: {m.request}  {m.a}  vs  {m.b}")
        for name, stats in (("out", m.out), ("lse", m.lse)):
            if stats is not None:
                console.print(f"    {name}: {stats}")
        console.print(f"    why: {'; '.join(m.why)}")
    if len(cmp.mismatches) > _MISMATCH_MAX:
        console.print(f"... and {len(cmp.mismatches) - _MISMATCH_MAX} more mismatches")
    _listing(console, "missing cells (a failure)", cmp.missing, "bold red")
    _listing(console, "duplicate rows (a failure)", cmp.duplicates, "bold red")
    _listing(console, "kernel audit failures (a failure)", cmp.audit, "bold red")
    _listing(console, "cells that errored (a failure)", [f"{k}: {r}" for k, r in cmp.errors], "bold red")
    not_run = defaultdict(list)
    for ident, status, reason in cmp.not_run:
        not_run[(status, reason)].append(ident)
    for (status, reason), idents in not_run.items():
        console.print(f"[yellow]{status}[/] ({len(idents)} rows, not a pass): {reason}")
    _listing(console, "runs not complete", cmp.incomplete_runs, "yellow")
    verdict = "[bold red]DETERMINISM FAILURE[/]" if cmp.failed else "[bold green]REPRODUCIBLE[/]"
    console.print(f"verdict: {verdict} (exit {cmp.exit_code})")
