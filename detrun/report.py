"""One self-contained HTML report of a Comparison: inline CSS and SVG, no script, no network."""

from __future__ import annotations

import math
from html import escape
from typing import Dict, List, Sequence

from .baseline import run_fingerprints
from .compare import AXES, Comparison, collapse
from .fingerprint import FINGERPRINT_FIELDS
from .junit import mismatch_text
from .paths import write_output
from .store import RunStore

COLOURS = {"equal": "#2ca02c", "explained": "#f0b400", "differs": "#d62728", "n/a": "#d9d9d9"}
_CSS = """body{font:14px sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}pre{margin:0;white-space:pre-wrap}
.verdict{font-size:22px;font-weight:bold;padding:8px 12px;color:#fff;display:inline-block}
.fail{background:#d62728}.pass{background:#2ca02c}svg text{font:12px sans-serif}"""
_CELL_W, _CELL_H, _LABEL_W, _HEAD_H = 90, 22, 170, 24


def heatmap_svg(cmp: Comparison) -> str:
    """(request x axis) cells coloured by verdict; one <rect class="cell"> per cell."""
    rows = collapse(cmp.verdicts)
    width, height = _LABEL_W + _CELL_W * len(AXES), _HEAD_H + _CELL_H * len(rows)
    out = [f'<svg id="heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    for j, axis in enumerate(AXES):
        out.append(f'<text x="{_LABEL_W + j * _CELL_W + 8}" y="16">{axis}</text>')
    for i, (request, cells) in enumerate(rows.items()):
        y = _HEAD_H + i * _CELL_H
        out.append(f'<text x="4" y="{y + 15}">{escape(request)}</text>')
        for j, axis in enumerate(AXES):
            v = cells[axis]
            tip = f"{request} / {axis}: {v.status} ({v.groups} groups, {v.rows} rows)"
            out.append(f'<rect class="cell" data-status="{v.status}" x="{_LABEL_W + j * _CELL_W}" y="{y}" '
                       f'width="{_CELL_W - 2}" height="{_CELL_H - 2}" fill="{COLOURS[v.status]}">'
                       f'<title>{escape(tip)}</title></rect>')
    out.append("</svg>")
    return "".join(out)


def max_ulp_by_request(cmp: Comparison) -> Dict[str, int]:
    worst: Dict[str, int] = {name: 0 for name in collapse(cmp.verdicts)}
    for m in cmp.mismatches:
        base, _, copy = m.request.partition("#")
        name = f"{base}#*" if copy else base
        ulps = [s.max_ulp for s in (m.out, m.lse) if s is not None]
        worst[name] = max([worst.get(name, 0), *ulps])
    return worst


def ulp_plot_svg(cmp: Comparison) -> str:
    """Horizontal bars of the largest ULP distance seen per request (log scale)."""
    worst = max_ulp_by_request(cmp)
    unexplained = {m.request.partition("#")[0] for m in cmp.mismatches if not m.explained}
    top = max([1, *worst.values()])
    scale = 500 / math.log10(top + 1) if top > 1 else 500
    out = [f'<svg id="ulp-plot" xmlns="http://www.w3.org/2000/svg" width="{_LABEL_W + 600}" '
           f'height="{_CELL_H * len(worst) + 4}">']
    for i, (name, ulp) in enumerate(worst.items()):
        y, length = i * _CELL_H, math.log10(ulp + 1) * scale
        colour = COLOURS["differs" if name.partition("#")[0] in unexplained else "explained"]
        out.append(f'<text x="4" y="{y + 15}">{escape(name)}</text>')
        out.append(f'<rect class="bar" x="{_LABEL_W}" y="{y + 2}" width="{length:.1f}" height="{_CELL_H - 6}" '
                   f'fill="{colour}"/><text x="{_LABEL_W + length + 6:.1f}" y="{y + 15}">{ulp}</text>')
    out.append("</svg>")
    return "".join(out)


def _table(head: Sequence[str], rows: List[Sequence[str]]) -> str:
    cells = "".join(f"<tr>{''.join(f'<td>{c}</td>' for c in row)}</tr>" for row in rows)
    return f"<table><tr>{''.join(f'<th>{escape(h)}</th>' for h in head)}</tr>{cells}</table>"


def _listing(title: str, items: Sequence[str]) -> str:
    if not items:
        return ""
    return f"<h3>{escape(title)} ({len(items)})</h3>" + _table(["item"], [[escape(i)] for i in items])


def build_report(store: RunStore, cmp: Comparison, title: str = "detrun report") -> str:
    env = run_fingerprints(store, cmp.runs)
    counts = {s: sum(v.status == s for v in cmp.verdicts) for s in COLOURS}
    verdict = ("DETERMINISM FAILURE", "fail") if cmp.failed else ("REPRODUCIBLE", "pass")
    summary = (f"runs: {', '.join(cmp.runs)}; {cmp.rows} rows; comparisons: "
               + ", ".join(f"{n} {s}" for s, n in counts.items())
               + f"; missing {len(cmp.missing)}, duplicates {len(cmp.duplicates)}, errors {len(cmp.errors)}"
               + (" (strict: explained differences fail)" if cmp.strict else ""))
    legend = " ".join(f'<span style="background:{c};padding:0 8px">&nbsp;</span> {s}' for s, c in COLOURS.items())
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1><div class='verdict {verdict[1]}' id='verdict'>{verdict[0]} "
        f"(exit {cmp.exit_code})</div><p>{escape(summary)}</p>",
        "".join(f"<p>baseline: {escape(line)}</p>" for line in cmp.baseline_context),
        f"<h2>Verdicts (request x comparison axis)</h2><p>{legend}</p>{heatmap_svg(cmp)}",
        f"<h2>Max ULP per request</h2>{ulp_plot_svg(cmp)}",
        "<h2>Environment</h2>" + _table(["fingerprint", *FINGERPRINT_FIELDS],
                                        [[escape(fp), *(escape(str(f[k])) for k in FINGERPRINT_FIELDS)]
                                         for fp, f in sorted(env.items())]),
        "<h2>Mismatches</h2>" + _table(["axis", "request", "label", "details"],
                                       [[m.axis, escape(m.request), escape(m.label), f"<pre>{escape(mismatch_text(m))}</pre>"]
                                        for m in cmp.mismatches]),
        _listing("missing cells (a failure)", cmp.missing),
        _listing("duplicate rows (a failure)", cmp.duplicates),
        _listing("cells that errored (a failure)", [f"{k}: {r}" for k, r in cmp.errors]),
        _listing("not run (not a pass)", [f"{k}: {s}: {r}" for k, s, r in cmp.not_run]),
        _listing("noted: equal although plans differ", cmp.notes),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


def write_report(store: RunStore, cmp: Comparison, path: str, title: str = "detrun report",
                 option: str = "-o/--output") -> None:
    """Write the report; a failed write is a DetrunError naming option."""
    write_output(path, build_report(store, cmp, title), option)
