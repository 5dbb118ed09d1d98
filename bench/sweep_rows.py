"""Compare of a sweep-sized run: bench/jobs/sweep10k.yaml's 40,000 rows, written as one task writes them, then
verdict_of, `detrun compare --format json` and the driver's write of those rows (store.write_rows) timed in fresh
processes, before and after a change.

    python bench/sweep_rows.py /tmp/sweep-rows                          # write the run (once) and time this checkout
    git archive main detrun | tar -x -C /tmp/before                     # the code before the change
    python bench/sweep_rows.py /tmp/sweep-rows --before /tmp/before     # both, interleaved: ratios before/after

The run has the sweep's cells (125 cases x their requests x 2 modes x 40 repeats, one GPU slot) and FA2-shaped
plans: cudagraph always splits the KV (a fixed padded batch), eager splits it in even cases only, and the
output digest follows the fields that decide the arithmetic (cta_tile_q, split_kv, kv_chunk_size). So along
mode half the groups are explained and half are equal with a note, the shared target requests differ
(explained) across batch, and the explained examples' rows are read whole (rows_at). Besides: DIFFS rows with
another output digest (unexplained), ERRORS rows that failed, one missing row. With --before the verdict JSON
of both codes is compared byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # as a script or imported: its siblings
from compare_scale import ROOT, timed  # noqa: E402
from gen_rows import schema_table  # noqa: E402

from detrun.record.keys import key_parts  # noqa: E402
from detrun.spec.matrix import key_layout, shards  # noqa: E402
from detrun.spec.model import spec_from_dict  # noqa: E402
from detrun.store.runs import RunStore  # noqa: E402

JOB = Path(__file__).parent / "jobs" / "sweep10k.yaml"
RUN = "sweep10k-rows"
DIFFS, ERRORS = 3, 2
CODE = {
    "verdict_of": "from detrun.judge.baseline import verdict_of; from detrun.store.runs import RunStore; "
                  "s = RunStore({root!r}); t = time.perf_counter(); v = verdict_of(s, [{run!r}]); "
                  "print('@T', time.perf_counter() - t); print(v.headline[:70])",
    "detrun compare": "from detrun.cli import main; import sys; "
                      "sys.argv = ['detrun', 'compare', {run!r}, '--runs-root', {root!r}, '--format', 'json']; main()",
    # the driver's write of a shard that returned these rows (make_row, Arrow, Parquet); the file's rows hashed
    "driver write": "import glob, hashlib, tempfile, pyarrow.parquet as pq; from detrun.store.runs import RunStore; "
                    "rows = pq.read_table(glob.glob({root!r} + '/' + {run!r} + '/rows/*.parquet')[0]).to_pylist(); "
                    "s = RunStore(tempfile.mkdtemp()); t = time.perf_counter(); p = s.write_rows('w', 'g0', rows); "
                    "print('@T', time.perf_counter() - t); "
                    "print(hashlib.blake2b(repr(pq.read_table(p).to_pylist()).encode()).hexdigest())",
}
TIMED_CALL = ("verdict_of", "driver write")  # timed inside the process ('@T'); the others by its wall


def plan(case: int, mode: str) -> dict:
    """An FA2-shaped plan of one case and mode (the module docstring)."""
    graph = mode == "cudagraph"
    split = graph or case % 2 == 0
    return {"padded_batch_size": 132 if graph else 8 * (1 + case % 7), "total_num_rows": 1024 + 64 * case,
            "cta_tile_q": 64 if case % 3 else 128, "enable_cuda_graph": graph, "split_kv": split,
            "kv_chunk_size": (512, 1024, 2048)[case % 3] if split else 0}


def _digest(*parts) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


def sweep_table(run_id: str = RUN) -> tuple:
    """(the job's spec as a dict, its rows in worker order: repeat, case, mode, request)."""
    data = yaml.safe_load(JOB.read_text())
    spec = spec_from_dict(data)
    (shard,) = shards(spec, 1)
    cells, blocks = key_layout(spec, 1)
    case_of = {name: i for i, name in enumerate(spec.cases)}
    plans = [plan(case_of[c], m) for c, _, m, _ in cells]
    arith = [(r, p["cta_tile_q"], p["split_kv"], p["kv_chunk_size"]) for (_, r, _, _), p in zip(cells, plans)]
    n = len(cells) * len(blocks)
    cell, block = np.arange(n) % len(cells), np.arange(n) // len(cells)
    per_cell = lambda values: pa.array(values).take(pa.array(cell))  # noqa: E731
    heads, tails = key_parts(cells, blocks)
    columns = {name: per_cell([c[i] for c in cells]) for i, name in enumerate(("case", "request", "mode", "phase"))}
    table = schema_table(n, {
        **columns, "run_id": run_id, "slot": 0, "shard": shard.shard_id,
        "key": pc.binary_join_element_wise(heads.take(pa.array(cell)), tails.take(pa.array(block)), ""),
        "repeat": pa.array(np.asarray([r for _, r in blocks], dtype=np.int32)[block]),
        "plan": per_cell([json.dumps(p) for p in plans]),
        "out_digest": per_cell([_digest("out", *a) for a in arith]),
        "lse_digest": per_cell([_digest("lse", *a) for a in arith]),
    })
    return data, _trouble(table)


def _trouble(table: pa.Table) -> pa.Table:
    """DIFFS rows with another output digest, ERRORS failed rows (far apart), and the last row missing."""
    rows = table.to_pylist()  # 40,000 dicts: fine once, for a bench
    for k in range(DIFFS):
        rows[7919 * (k + 1)]["out_digest"] = f"{k:032x}"
    for k in range(ERRORS):
        rows[9973 * (k + 1)].update(status="error", reason="RuntimeError: CUDA error: an illegal memory access")
    return pa.Table.from_pylist(rows[:-1], schema=table.schema)


def generate(root: str) -> str:
    """The run under root (written once; kept when there)."""
    store = RunStore(root)
    if RUN in store.list_runs():
        return RUN
    data, table = sweep_table()
    store.create_run(RUN, data, 1)
    store.fs.create_dir(store._p(RUN, "rows"), recursive=True)
    (shard,) = shards(spec_from_dict(data), 1)
    pq.write_table(table, store._p(RUN, "rows", f"part-{shard.shard_id}.parquet"), compression="zstd",
                   filesystem=store.fs)
    store.finish_run(RUN, "complete")
    return RUN


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="runs root: the run is written there once")
    ap.add_argument("--before", help="a copy of the detrun package before the change (a folder holding detrun/)")
    ap.add_argument("--repeat", type=int, default=3, help="times each measurement (interleaved with --before)")
    args = ap.parse_args()
    run = generate(args.root)
    codes = {"after": ROOT, **({"before": os.path.abspath(args.before)} if args.before else {})}
    print(f"run {run} under {args.root}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    times: dict = {}
    outputs: dict = {}
    for _ in range(args.repeat):
        for side, where in codes.items():
            for name, code in CODE.items():
                got = timed(code.format(root=args.root, run=run), where)
                seconds = got.call if name in TIMED_CALL else got.wall
                times.setdefault((name, side), []).append(seconds)
                outputs.setdefault((name, side), got.out)
                print(f"{side:6s} {name:15s} {seconds:6.2f} s (wall {got.wall:6.2f} s) | peak RSS {got.rss_mib:5.0f} "
                      f"MiB | exit {got.rc} | {got.last[:60]}")
    for name in CODE:
        after = statistics.median(times[(name, "after")])
        line = f"{name:15s} after {after:6.2f} s (median of {args.repeat})"
        if args.before:
            before = statistics.median(times[(name, "before")])
            line += f", before {before:6.2f} s: {before / after:5.1f}x faster"
        print(line)
    if args.before:
        a, b = outputs[("detrun compare", "after")], outputs[("detrun compare", "before")]
        print(f"verdict JSON: {len(a.encode())} bytes after, {len(b.encode())} before: "
              f"{'identical' if a == b else 'DIFFERENT'}")
        a, b = (outputs[("driver write", side)].split()[-1] for side in ("after", "before"))
        print(f"rows the driver wrote: {'identical' if a == b else 'DIFFERENT'} (hash {a[:16]}, before {b[:16]})")


if __name__ == "__main__":
    main()
