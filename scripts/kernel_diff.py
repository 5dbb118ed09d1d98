"""The kernel names two runs of one job recorded per (mode, path, plan): the FlashInfer kernels must be the same
(the audit reads those), the others (fills, copies) are listed where they differ. For a change to how kernels
are profiled (kernel_session.py against the code before). Exit 0 when every plan profiled in both runs names
the same FlashInfer kernels, 1 when one differs or a plan was profiled in one run only. No torch, no Ray.

    python3 scripts/kernel_diff.py RUN_A RUN_B [--runs-root runs]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict

from detrun.store.runs import RunStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--runs-root", default="runs")
    opts = ap.parse_args()
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
        fa, fb = ({n for n in s if "flashinfer" in n} for s in (a, b))
        if fa == fb:
            same += 1
        else:
            differ.append((key, sorted(fa - fb), sorted(fb - fa)))
        for n in (a - fa) ^ (b - fb):
            others[(opts.a if n in a else opts.b, n[:80])] += 1
    print(f"plans profiled in both runs: {same + len(differ)}; the same FlashInfer kernels: {same}; "
          f"different: {len(differ)}; profiled in one run only: {dict(alone) or 'none'}")
    for (mode, path, plan), only_a, only_b in differ[:10]:
        cut = [[n[:120] for n in only] for only in (only_a, only_b)]
        print(f"  {mode} {path} {plan[:80]}: only in {opts.a}: {cut[0]}; only in {opts.b}: {cut[1]}")
    for (run, name), n in sorted(others.items()):
        print(f"  not FlashInfer's, only in {run}: {name} ({n} plans)")
    sys.exit(1 if differ or alone else 0)


if __name__ == "__main__":
    main()
