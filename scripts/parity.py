"""Train/infer parity runs without Ray, and the numbers of each pair of them (scripts/gpu_parity.sh runs it).

    python3 scripts/parity.py run --runs-root runs [--resume] < PLAN   # PLAN lines: RUN_ID JOB [KEY=VALUE ...]
    python3 scripts/parity.py pairs --runs-root runs [--json FILE] RUN_ID RUN_ID ...

run: each line's job, with its overrides, run in this process (detrun.run.inline, every shard here: one
FlashInfer JIT and one torch.compile cache for all the runs), one after the other; a run that fails is said
and the next one runs. With --resume a run already there is kept when complete (finished, with rows) and
replaced when not (a run killed mid-way); without it, a run already there fails its line.
pairs: every pair of the runs given, over the ok rows both have (same key): rows compared, rows bitwise equal
(out and LSE), max ULP, max abs and max rel (against the second run) of out and LSE (judge/diffstats.py), rows
missing on either side; then each run's largest error against its reference (the rows' ref_error,
jobs/parity.yaml sets reference_error: fp64).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from typing import Dict, List

import numpy as np

from detrun.errors import DetrunError
from detrun.judge.diffstats import decode, diff_stats
from detrun.record.status import run_complete
from detrun.store.runs import RunStore


def resumed(store: RunStore, run_id: str) -> bool:
    """--resume: True (said) when run_id is there and complete, kept; one there but not complete (killed: no
    finished status, no rows, an unreadable manifest) is removed (said), to be run again."""
    try:
        store.check_new_run(run_id)
        return False  # not there yet
    except DetrunError:
        pass
    manifest = None if store.damage(run_id) else store.manifest(run_id)
    if manifest is not None and run_complete(manifest) and store.row_files(run_id):
        print(f"== run {run_id}: already complete, kept", flush=True)
        return True
    state = f"status {manifest.get('status')}, {len(store.row_files(run_id))} row files" if manifest else "unreadable"
    store.remove_run(run_id)
    print(f"== run {run_id}: incomplete ({state}), removed; running it again", flush=True)
    return False


def run_plan(root: str, lines: List[str], resume: bool = False) -> int:
    from detrun.run.inline import run_inline
    from detrun.spec.model import load_spec

    store, failed = RunStore(root), 0
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        run_id, job, *sets = line.split()
        start = time.perf_counter()
        try:
            if resume and resumed(store, run_id):
                continue
            left = run_inline(store, load_spec(job, sets), run_id)
            table = store.read_rows([run_id])
            rows = table.column("status").to_pylist()
            counts = {s: rows.count(s) for s in sorted(set(rows))}
            print(f"== run {run_id}: {counts}{f', {len(left)} cells left for isolated workers' if left else ''} "
                  f"in {time.perf_counter() - start:.1f} s", flush=True)
            kernels = sorted({k for ks in table.column("kernels").to_pylist() for k in ks or []})
            print(f"   kernels recorded: {'; '.join(k[:90] for k in kernels[:8]) or 'none'}", flush=True)
            reasons = sorted({r for r in table.column("reason").to_pylist() if r})
            for reason in reasons[:3]:  # why cells did not run (an Unsupported capture, a kernel's error)
                print(f"   {reason[:300]}", flush=True)
        except Exception as exc:  # one run's failure is reported; the others still run
            failed += 1
            print(f"== run {run_id} FAILED after {time.perf_counter() - start:.1f} s: "
                  f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
    return 1 if failed else 0


def _ok_rows(store: RunStore, run_id: str) -> Dict[str, dict]:
    return {r["key"]: r for r in store.read_rows([run_id]).to_pylist() if r["status"] == "ok"}


def pair_stats(store: RunStore, a: str, b: str, rows_a: Dict[str, dict], rows_b: Dict[str, dict]) -> dict:
    """The numbers of one pair of runs over the keys both have."""
    keys = sorted(set(rows_a) & set(rows_b))
    out = {"a": a, "b": b, "rows": len(keys), "only_a": len(set(rows_a) - set(rows_b)),
           "only_b": len(set(rows_b) - set(rows_a)), "bitwise_rows": 0}
    for which in ("out", "lse"):
        out[which] = {"max_ulp": 0, "max_abs": 0.0, "max_rel": 0.0, "differing_rows": 0}
    for key in keys:
        ra, rb = rows_a[key], rows_b[key]
        same = True
        for which in ("out", "lse"):
            if ra[f"{which}_digest"] == rb[f"{which}_digest"]:
                continue
            same = False
            blob_a = store.read_blob([a], ra[f"{which}_digest"])
            blob_b = store.read_blob([b], rb[f"{which}_digest"])
            stat = out[which]
            stat["differing_rows"] += 1
            if blob_a is None or blob_b is None or ra[f"{which}_dtype"] != rb[f"{which}_dtype"]:
                stat["max_ulp"] = stat["max_abs"] = stat["max_rel"] = float("inf")  # not comparable: say so
                continue
            d = diff_stats(blob_a, blob_b, ra[f"{which}_dtype"], ra[f"{which}_shape"])
            _, va = decode(blob_a, ra[f"{which}_dtype"])
            _, vb = decode(blob_b, rb[f"{which}_dtype"])
            nz = vb != 0
            rel = float(np.max(np.abs(va[nz] - vb[nz]) / np.abs(vb[nz]))) if nz.any() else 0.0
            stat["max_ulp"] = max(stat["max_ulp"], d.max_ulp)
            stat["max_abs"] = max(stat["max_abs"], d.max_abs)
            stat["max_rel"] = max(stat["max_rel"], rel)
        out["bitwise_rows"] += same
    return out


def ref_summary(rows: Dict[str, dict]) -> dict:
    """The largest ref_error numbers over a run's ok rows ({} when its rows have none)."""
    worst: dict = {}
    for row in rows.values():
        if not row.get("ref_error"):
            continue
        err = json.loads(row["ref_error"])
        worst["reference"] = err["reference"]
        for which in ("out", "lse"):
            for name, value in err[which].items():
                worst.setdefault(which, {})[name] = max(worst.get(which, {}).get(name, 0.0), value)
    return worst


def pairs(root: str, run_ids: List[str], json_path: str = "") -> int:
    store = RunStore(root)
    rows = {r: _ok_rows(store, r) for r in run_ids}
    results = [pair_stats(store, a, b, rows[a], rows[b]) for a, b in itertools.combinations(run_ids, 2)]
    for p in results:
        kind = "NO ROWS" if not p["rows"] else "BITWISE" if p["bitwise_rows"] == p["rows"] else "differs"
        missing = f" (only in one: {p['only_a']}/{p['only_b']})" if p["only_a"] or p["only_b"] else ""
        print(f"{p['a']:>24} vs {p['b']:<24} {kind:8} {p['bitwise_rows']}/{p['rows']} rows bitwise{missing}; "
              + "; ".join(f"{w} max ULP {p[w]['max_ulp']} abs {p[w]['max_abs']:.3g} rel {p[w]['max_rel']:.3g}"
                          for w in ("out", "lse")))
    refs = {r: ref_summary(rows[r]) for r in run_ids}
    for run_id, worst in refs.items():
        if worst:
            print(f"{run_id:>24} vs {worst['reference']}: " + "; ".join(
                f"{w} max abs {worst[w]['max_abs']:.3g} rel {worst[w]['max_rel']:.3g} ULP {worst[w]['max_ulp']:.3g}"
                for w in ("out", "lse")))
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump({"pairs": results, "reference_error": refs}, f, indent=1, sort_keys=True)
    return 0


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["run", "pairs"])
    ap.add_argument("--runs-root", default="runs")
    ap.add_argument("--resume", action="store_true",
                    help="run: keep a run already complete, redo one left incomplete (killed)")
    ap.add_argument("--json", default="", help="pairs: also write the numbers to this file")
    ap.add_argument("runs", nargs="*", help="pairs: the run ids")
    args = ap.parse_intermixed_args(argv)
    if args.what == "run":
        return run_plan(args.runs_root, sys.stdin.read().splitlines(), args.resume)
    return pairs(args.runs_root, args.runs, args.json)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
