"""What SGLang's own backend did, cell by cell, from a run's stored rows (backend sglang): per (phase, mode,
case) the forward mode, SGLang's graph path, forward_metadata.use_ragged, the wrappers it planned and ran, the
path and kernel family, the main plan fields, and the rows' status (an error's reason). A markdown table.

    python3 scripts/sglang_cells.py RUNS_ROOT RUN [RUN ...]      # e.g. runs own-f0-df own-f1-df
"""

import argparse
import glob
import json
import os
from collections import OrderedDict

import pyarrow.parquet as pq

FIELDS = ("cta_tile_q", "kv_chunk_size", "split_kv", "padded_batch_size", "total_num_rows")


def cells(root: str, run: str) -> "OrderedDict[tuple, dict]":
    out: "OrderedDict[tuple, dict]" = OrderedDict()
    for path in sorted(glob.glob(os.path.join(root, run, "rows", "*.parquet"))):
        for r in pq.read_table(path).to_pylist():
            key = (r["phase"], r["mode"], r["case"])
            cell = out.setdefault(key, {"rows": 0, "status": set(), "row": None})
            cell["rows"] += 1
            cell["status"].add(r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason'][:90]}")
            if r["status"] == "ok" and cell["row"] is None:
                cell["row"] = r
    return out


def line(run: str, key: tuple, cell: dict) -> str:
    r = cell["row"] or {}
    w = json.loads(r.get("wiring") or "{}")
    plan = json.loads(r.get("plan") or "{}")
    fields = ", ".join(f"{f} {plan[f]}" for f in FIELDS if plan.get(f) is not None)
    prefix = ", ".join(f"{f} {plan['prefix.' + f]}" for f in FIELDS if plan.get("prefix." + f) is not None)
    status = "; ".join(sorted(cell["status"]))
    return (f"| {run} | {' / '.join(key)} | {w.get('forward_mode', '')} | {w.get('graph') or 'eager'} | "
            f"{w.get('use_ragged', '')} | {', '.join(w.get('planned', []))} | {', '.join(w.get('ran', []))} | "
            f"{r.get('path', '')} ({r.get('attn', '')}) | {fields}{'; prefix: ' + prefix if prefix else ''} | "
            f"{cell['rows']} | {status} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="the runs root")
    ap.add_argument("runs", nargs="+", help="run ids of backend sglang runs")
    args = ap.parse_args()
    print("| run | phase / mode / case | forward mode | SGLang graph | use_ragged | planned | ran | path (attn) | "
          "plan | rows | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in args.runs:
        for key, cell in cells(args.root, run).items():
            print(line(run, key, cell))


if __name__ == "__main__":
    main()
