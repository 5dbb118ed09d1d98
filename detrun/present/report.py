"""One self-contained HTML report of a Verdict: inline CSS and SVG, no script, no network."""

from __future__ import annotations

import math
from collections import Counter
from html import escape
from typing import Sequence

from ..judge.claims import AXIS_NAMES
from ..judge.verdict import CELL_STATES, FAIL, INFO, WARN, Verdict
from ..paths import write_output
from ..record.fingerprint import FINGERPRINT_FIELDS

# a cell's state (findings.Cell) -> its colour: red only where a difference breaks a claim
COLOURS = {"breaks": "#d62728", "explained": "#f0b400", "ignored": "#f0b400", "within": "#98df8a", "equal": "#2ca02c",
           "n/a": "#d9d9d9"}
_CSS = """body{font:14px sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}pre{margin:0;white-space:pre-wrap}
.verdict{font-size:22px;font-weight:bold;padding:8px 12px;color:#fff;display:inline-block}
.fail{background:#d62728}.pass{background:#2ca02c}svg text{font:12px sans-serif}
.sev-fail{color:#d62728;font-weight:bold}.sev-warn{color:#b07d00;font-weight:bold}.sev-info{color:#1f77b4}"""
_CELL_W, _CELL_H, _LABEL_W, _HEAD_H = 90, 22, 170, 24


def heatmap_svg(verdict: Verdict) -> str:
    """(request x axis) cells coloured by their state under the claims; one <rect class="cell"> per cell."""
    rows = verdict.cells
    width, height = _LABEL_W + _CELL_W * len(AXIS_NAMES), _HEAD_H + _CELL_H * len(rows)
    out = [f'<svg id="heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    for j, axis in enumerate(AXIS_NAMES):
        out.append(f'<text x="{_LABEL_W + j * _CELL_W + 8}" y="16">{axis}</text>')
    for i, (request, cells) in enumerate(rows.items()):
        y = _HEAD_H + i * _CELL_H
        out.append(f'<text x="4" y="{y + 15}">{escape(request)}</text>')
        for j, axis in enumerate(AXIS_NAMES):
            cell = cells[axis]
            tip = f"{request} / {axis}: {cell.text} ({cell.verdict.groups} groups, {cell.verdict.rows} rows)"
            out.append(f'<rect class="cell" data-status="{cell.state}" x="{_LABEL_W + j * _CELL_W}" y="{y}" '
                       f'width="{_CELL_W - 2}" height="{_CELL_H - 2}" fill="{COLOURS[cell.state]}">'
                       f'<title>{escape(tip)}</title></rect>')
    out.append("</svg>")
    return "".join(out)


def ulp_plot_svg(verdict: Verdict) -> str:
    """Horizontal bars of the largest ULP distance seen per request (log scale); red where it breaks a claim."""
    worst = verdict.max_ulp
    breaks = {name for name, row in verdict.cells.items() if any(c.state == "breaks" for c in row.values())}
    top = max([1, *worst.values()])
    scale = 500 / math.log10(top + 1) if top > 1 else 500
    out = [f'<svg id="ulp-plot" xmlns="http://www.w3.org/2000/svg" width="{_LABEL_W + 600}" '
           f'height="{_CELL_H * len(worst) + 4}">']
    for i, (name, ulp) in enumerate(worst.items()):
        y, length = i * _CELL_H, math.log10(ulp + 1) * scale
        colour = COLOURS["breaks" if name in breaks else "explained"]
        out.append(f'<text x="4" y="{y + 15}">{escape(name)}</text>')
        out.append(f'<rect class="bar" x="{_LABEL_W}" y="{y + 2}" width="{length:.1f}" height="{_CELL_H - 6}" '
                   f'fill="{colour}"/><text x="{_LABEL_W + length + 6:.1f}" y="{y + 15}">{ulp}</text>')
    out.append("</svg>")
    return "".join(out)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cells = "".join(f"<tr>{''.join(f'<td>{c}</td>' for c in row)}</tr>" for row in rows)
    return f"<table><tr>{''.join(f'<th>{escape(h)}</th>' for h in head)}</tr>{cells}</table>"


def _findings_table(findings) -> str:
    """Every finding the verdict counts: severity, kind, what, cells involved, the numbers."""
    order = {FAIL: 0, WARN: 1, INFO: 2}
    rows = [[f'<span class="sev-{f.severity}">{f.severity}</span>', escape(f.label), escape(f.title),
             escape(", ".join(f.items[:20]) + (f" (+{len(f.items) - 20} more)" if len(f.items) > 20 else "")),
             f"<pre>{escape(f.detail)}</pre>" if f.detail else ""]
            for f in sorted(findings, key=lambda f: order[f.severity])]
    return _table(["severity", "kind", "finding", "cells", "details"], rows) if rows else "<p>none</p>"


def build_report(verdict: Verdict, title: str = "detrun report") -> str:
    env = verdict.environment
    cells = sorted((cell for row in verdict.cells.values() for cell in row.values()),
                   key=lambda c: list(COLOURS).index(c.state))  # what breaks a claim first
    counts = Counter(c.word for c in cells)
    summary = (f"runs: {', '.join(verdict.runs)}; {verdict.rows} rows; request x axis: "
               + ", ".join(f"{n} {word}" for word, n in counts.items()) + f"; claims: {verdict.describe_claims()}")
    claims = _table(["axis", "claim", "status", "measured", "groups", "differ (unexplained; a bound: beyond it)",
                     "explained (a bound: within it)", "causes"],
                    [[c.axis, escape(c.level), escape(c.status), escape(c.measured), str(c.groups),
                      escape(", ".join(c.differing)), escape(", ".join(c.explained)), escape(c.cause_text())]
                     for c in verdict.claims])
    legend = " ".join(f'<span style="background:{c};padding:0 8px">&nbsp;</span> {CELL_STATES[s]}'
                      for s, c in COLOURS.items())
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1><div class='verdict {'fail' if verdict.failed else 'pass'}' id='verdict'>"
        f"{escape(verdict.label)} (exit {verdict.exit_code})</div><p id='headline'>{escape(verdict.headline)}</p>"
        f"<p id='summary'>{escape(summary)}</p>",
        "".join(f"<p>baseline: {escape(line)}</p>" for line in verdict.baseline.lines),
        f"<h2>Claims</h2>{claims}",
        f"<h2>Verdicts (request x comparison axis)</h2><p>{legend}</p>{heatmap_svg(verdict)}",
        f"<h2>Findings</h2><div id='findings'>{_findings_table(verdict.findings)}</div>",
        f"<h2>Max ULP per request</h2>{ulp_plot_svg(verdict)}",
        "<h2>Environment</h2>" + _table(["fingerprint", *FINGERPRINT_FIELDS],
                                        [[escape(fp), *(escape(str(f[k])) for k in FINGERPRINT_FIELDS)]
                                         for fp, f in sorted(env.items())]),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


def write_report(verdict: Verdict, path: str, title: str = "detrun report", option: str = "-o/--output") -> None:
    """Write the report; a failed write is a DetrunError naming option."""
    write_output(path, build_report(verdict, title), option)
