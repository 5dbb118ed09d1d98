"""The plan differences between two runs of one job (e.g. made on two flashinfer versions): cells (case,
request, mode, repeat, slot) that ran in both, grouped by what differs between their recorded plans,
paths and kernel families, each group with how many cells carry the same bits. No torch, no Ray.

    python3 scripts/plan_diff.py RUN_A RUN_B [--runs-root runs]
    python3 scripts/plan_diff.py RUN_A RUN_B --kernels   # the kernel names per (mode, path, plan)

--kernels, for a change to how kernels are profiled (kernel_session.py against the code before): the FlashInfer
kernels each plan recorded must be the same in both runs (the audit reads those; exit 1 when one differs or a
plan was profiled in one run only, or none in both); the others (fills, copies) are listed where they differ.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict

from detrun.judge.audit import is_flashinfer_kernel
from detrun.judge.explain import plan_differences
from detrun.store.runs import RunStore

CELL = ("case", "request", "mode", "repeat", "slot")
COLUMNS = ("run_id", *CELL, "status", "backend", "attn", "path", "plan", "out_digest", "lse_digest")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--runs-root", default="runs")
    ap.add_argument("--kernels", action="store_true", help="compare the kernel names per (mode, path, plan)")
    opts = ap.parse_args()
    if opts.kernels:
        sys.exit(kernel_names(opts))
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


def kernel_names(opts) -> int:
    """Per (mode, path, plan) profiled in both runs: the same FlashInfer kernels? 0 if so for every plan."""
    rows = RunStore(opts.runs_root).dataset([opts.a, opts.b]).to_table(
        columns=["run_id", "mode", "path", "plan", "kernels"]).to_pylist()
    names: dict = defaultdict(lambda: defaultdict(set))  # (mode, path, plan) -> run -> names
    for r in rows:
        if r["kernels"]:
            names[(r["mode"], r["path"], r["plan"])][r["run_id"]].update(r["kernels"])
    same, differ, alone, others = 0, [], Counter(), Counter()
    for key, runs in names.items():
        if len(runs) < 2:
            alone[next(iter(runs))] += 1
            continue
        a, b = runs[opts.a], runs[opts.b]
        fa, fb = ({n for n in s if is_flashinfer_kernel(n)} for s in (a, b))
        if not fa and not fb:  # no FlashInfer kernel in either (another backend's rows): nothing to compare
            continue
        if fa == fb:
            same += 1
        else:
            differ.append((key, sorted(fa - fb), sorted(fb - fa)))
        for n in (a - fa) ^ (b - fb):
            others[(opts.a if n in a else opts.b, n[:80])] += 1
    print(f"plans with FlashInfer kernels in both runs: {same + len(differ)}; the same FlashInfer kernels: {same}; "
          f"different: {len(differ)}; profiled in one run only: {dict(alone) or 'none'}")
    for (mode, path, plan), only_a, only_b in differ[:10]:
        cut = [[n[:120] for n in only] for only in (only_a, only_b)]
        print(f"  {mode} {path} {plan[:80]}: only in {opts.a}: {cut[0]}; only in {opts.b}: {cut[1]}")
    for (run, name), n in sorted(others.items()):
        print(f"  not FlashInfer's, only in {run}: {name} ({n} plans)")
    if not same + len(differ):
        print("nothing compared: no plan recorded FlashInfer kernels in both runs")
    return 1 if differ or alone or not same + len(differ) else 0


if __name__ == "__main__":
    main()
