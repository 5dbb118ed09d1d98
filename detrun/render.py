"""Terminal output of a Comparison (rich)."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.table import Table

from .compare import AXES, Comparison, collapse
from .history import History

_STYLE = {"equal": "green", "explained": "yellow", "differs": "bold red", "n/a": "dim"}
_LIST_MAX = 10
_MISMATCH_MAX = 12


def _cell(v) -> str:
    if v.status == "n/a":
        return "[dim]n/a[/]"
    bad = {"differs": v.differing_groups, "explained": v.explained_groups}.get(v.status)
    tail = f" {bad}/{v.groups}" if bad is not None else f" ({v.rows})"
    return f"[{_STYLE[v.status]}]{v.status}[/]{tail}"


def _listing(console: Console, title: str, items, style: str) -> None:
    if not items:
        return
    console.print(f"[{style}]{title}: {len(items)}[/]")
    for item in items[:_LIST_MAX]:
        console.print(f"  {item}")
    if len(items) > _LIST_MAX:
        console.print(f"  ... and {len(items) - _LIST_MAX} more")


def _spread(mismatches):
    """Unexplained first, then one per (request base name, axis) before any repeats of a pair."""
    seen, first, rest = set(), [], []
    for m in sorted(mismatches, key=lambda m: m.explained):
        key = (m.request.partition("#")[0], m.axis)
        (rest if key in seen else first).append(m)
        seen.add(key)
    return first + rest


def print_comparison(cmp: Comparison, console: Console) -> None:
    table = Table(title=f"bitwise verdicts ({cmp.rows} rows, runs: {', '.join(cmp.runs)})")
    table.add_column("request")
    for axis in AXES:
        table.add_column(axis)
    for request, cells in collapse(cmp.verdicts).items():
        table.add_row(request, *(_cell(cells[a]) for a in AXES))
    console.print(table)
    for line in cmp.baseline_context:
        console.print(f"[cyan]baseline[/]: {line}")
    for m in _spread(cmp.mismatches)[:_MISMATCH_MAX]:
        tag = f"[yellow]{m.label}[/]" if m.explained else "[red]differs (unexplained)[/]"
        console.print(f"{tag} across {m.axis}: {m.request}  {m.a}  vs  {m.b}")
        for name, stats in (("out", m.out), ("lse", m.lse)):
            if stats is not None:
                console.print(f"    {name}: {stats}")
        console.print(f"    why: {'; '.join(m.why)}")
    if len(cmp.mismatches) > _MISMATCH_MAX:
        console.print(f"... and {len(cmp.mismatches) - _MISMATCH_MAX} more mismatches")
    _listing(console, "noted: equal although plans differ", cmp.notes, "cyan")
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
    if cmp.strict:
        verdict += " (strict: explained differences fail too)"
    console.print(f"verdict: {verdict} (exit {cmp.exit_code})")


def print_history(hist: History, console: Console) -> None:
    console.print(f"history: {len(hist.runs)} runs, oldest first")
    for r in hist.runs:
        style = {"pass": "green", "FAIL": "bold red"}.get(r.verdict, "yellow")
        console.print(f"{r.index:>3}  {r.run_id}  {r.created[:19]}  {r.spec}  {','.join(r.fingerprints) or '-'}  "
                      f"[{style}]{r.verdict}[/]  rows={r.rows} ok={r.ok} differs={r.differs} "
                      f"explained={r.explained} missing={r.missing} errors={r.errors}", soft_wrap=True)
    _listing(console, "cases whose bits changed", [str(d) for d in hist.drifts], "bold red")


def print_timings(rows, wall: float, steady, console: Console) -> None:
    """Where a run's seconds went, stage by stage (sums over shards; one GPU runs them in turn), and the
    steady state: cells whose case and mode ran before in their task."""
    table = Table(title=f"where the time went ({wall:.2f} s from placement group to the last shard)")
    for name in ("stage", "seconds", "share", "count"):
        table.add_column(name, justify="left" if name == "stage" else "right")
    total = sum(s for _, s, _ in rows) or 1.0
    for name, seconds, count in rows:
        style = "bold green" if name == "kernel" else ""
        table.add_row(f"[{style}]{name}[/]" if style else name, f"{seconds:.3f}", f"{100 * seconds / total:.1f}%",
                      str(count))
    table.add_row("sum over shards", f"{total:.3f}", "100%", "")
    console.print(table)
    if steady:
        console.print(steady_line(*steady))


def steady_line(cells: int, cell_s: float, parts: dict) -> str:
    """One cell in steady state: its wall, what it spent in kernels, plan() and digests, and the overhead."""
    ms = lambda s: f"{1e3 * s / cells:.3f} ms"  # noqa: E731
    kernel = parts.get("kernel", 0.0)
    rest = cell_s - sum(parts.values())
    over = f"{100 * (cell_s - kernel) / kernel:.1f}% of kernel time" if kernel > 0 else "no kernel time recorded"
    split = ", ".join(f"{name} {ms(s)}" for name, s in parts.items())
    # The host's digest and row work runs while the kernel runs: then the parts add up to more than the cell.
    tail = f"rest {ms(rest)}" if rest >= 0 else f"of which {ms(-rest)} ran on the host during the kernel"
    return (f"steady state ({cells} cells whose case and mode ran before in their task): {ms(cell_s)} per cell "
            f"({split}, {tail}); overhead {over}")
