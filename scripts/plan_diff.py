"""The plan differences between two runs of one job (e.g. made on two flashinfer versions): cells (case,
request, mode, repeat, slot) that ran in both, grouped by what differs between their recorded plans,
paths and kernel families, each group with how many cells carry the same bits. No torch, no Ray.

    python3 scripts/plan_diff.py RUN_A RUN_B [--runs-root runs]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from detrun.judge.explain import plan_differences
from detrun.store.runs import RunStore

CELL = ("case", "request", "mode", "repeat", "slot")
COLUMNS = ("run_id", *CELL, "status", "backend", "attn", "path", "plan", "out_digest", "lse_digest")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--runs-root", default="runs")
    opts = ap.parse_args()
    rows = RunStore(opts.runs_root).dataset([opts.a, opts.b]).to_table(columns=list(COLUMNS)).to_pylist()
    cells = defaultdict(dict)
    for r in rows:
        if r["status"] == "ok":
            cells[tuple(r[c] for c in CELL)][r["run_id"]] = r
    groups = defaultdict(lambda: [0, 0])  # differences -> [cells, cells with the same bits]
    for pair in cells.values():
        if len(pair) == 2:
            a, b = pair[opts.a], pair[opts.b]
            g = groups[tuple(f"{k}: {x} -> {y}" for k, x, y in plan_differences(a, b))]
            g[0] += 1
            g[1] += (a["out_digest"], a["lse_digest"]) == (b["out_digest"], b["lse_digest"])
    print(f"plans {opts.a} -> {opts.b}: {sum(n for n, _ in groups.values())} cells ran in both")
    for diffs, (n, same) in sorted(groups.items(), key=lambda g: -g[1][0]):
        print(f"  {n} cells ({same} same bits): {'; '.join(diffs) or 'same plan'}")


if __name__ == "__main__":
    main()
