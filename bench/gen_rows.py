"""Synthetic runs at scale: N result rows written straight as Parquet parts with the real SCHEMA.

    python bench/gen_rows.py /tmp/runs-10m                  # 10M rows, one run
    python bench/gen_rows.py /tmp/runs-1m --rows 1000000 --runs 2

Vectorised (pyarrow take/join, no per-row dicts). Each run has a manifest whose spec expands to
exactly the cells written (cases x requests#copies x modes x repeats x GPU slots), digests equal
across repeats, slots, modes and batches, plus injected trouble in the last run so compare has a real verdict:
DIFFS rows with another output digest (unexplained), one row with another plan but the same digest
(a note), one row with another plan and another digest (explained), and one missing row.
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from detrun.record.keys import key_parts
from detrun.record.rows import SCHEMA, make_row
from detrun.spec.matrix import shards
from detrun.spec.model import spec_from_dict
from detrun.store.runs import RunStore

SLOTS, MODES, CASES, REPEATS, PER_TASK = 4, ["eager", "cudagraph"], 25, 25, 5
DIFFS = 3
KERNEL = "flashinfer::BatchPrefillWithPagedKVCacheKernel<128, 4>"
PLAN = '{"kv_chunk_size": 64, "split_kv": false}'
OTHER_PLAN = '{"kv_chunk_size": 32, "split_kv": true}'
ROW = {  # an ok flashinfer row's constant fields (schema_table)
    "status": "ok", "backend": "flashinfer", "attn": "prefill", "path": "paged", "use_paged": True,
    "out_dtype": "bfloat16", "out_shape": [1, 32, 128], "lse_dtype": "float32", "lse_shape": [1, 32], "plan": PLAN,
    "kernels": [KERNEL], "run_ms": 0.05, "flags": "{}", "gpu_name": "NVIDIA H200", "sm_count": 132,
    "driver": "570.00", "cuda": "12.8", "torch": "2.8.0", "flashinfer": "0.4.0", "fingerprint": "0123456789abcdef",
}


def spec_for(rows: int, name: str = "scale") -> dict:
    copies = max(1, rows // (SLOTS * len(MODES) * CASES * REPEATS))
    return {
        "name": name, "backend": "flashinfer", "modes": MODES, "heads": {"qo": 32, "kv": 8},
        "head_dim": 128, "repeats": REPEATS, "repeats_per_task": PER_TASK,
        "requests": {"dec": {"qo_len": 1, "prefix_len": 512, "copies": copies}},
        "cases": {f"batch{i:02d}": ["dec"] for i in range(CASES)},
    }


def _const(value, n: int, type_=None) -> pa.Array:
    return pa.array([value], type=type_).take(pa.array(np.zeros(n, dtype=np.int32)))


def _digests(n: int, salt: str) -> pa.Array:
    return pa.array([hashlib.blake2b(f"{salt}{i}".encode(), digest_size=16).hexdigest() for i in range(n)])


def shard_table(spec, shard, run_id: str, out_d: pa.Array, lse_d: pa.Array) -> pa.Table:
    """The rows of one shard, repeat-major like the worker: repeat, case, mode, request."""
    members = spec.members(next(iter(spec.cases)))
    cases, modes, nreq = list(spec.cases), spec.modes, len(members)
    per_rep = len(cases) * len(modes) * nreq
    n = per_rep * len(shard.repeats)
    i = np.arange(n, dtype=np.int64)
    rep = np.asarray(shard.repeats, dtype=np.int32)[i // per_rep]
    cell = i % per_rep  # (case, mode, request) index
    case_i, mode_i, req_i = cell // (len(modes) * nreq), (cell // nreq) % len(modes), cell % nreq
    take = lambda values, idx: pa.array(values).take(pa.array(idx))  # noqa: E731
    case, mode, req = take(cases, case_i), take(modes, mode_i), take(members, req_i)
    heads, tails = key_parts([(c, r, m) for c in cases for m in modes for r in members],
                             [(shard.slot, r) for r in shard.repeats])
    key = pc.binary_join_element_wise(heads.take(pa.array(cell)), tails.take(pa.array(i // per_rep)), "")
    return schema_table(n, {
        "run_id": run_id, "key": key, "case": case, "request": req, "mode": mode, "repeat": pa.array(rep),
        "slot": shard.slot, "shard": shard.shard_id, "out_digest": out_d.take(pa.array(req_i)),
        "lse_digest": lse_d.take(pa.array(req_i)),
    })


def schema_table(n: int, columns: dict) -> pa.Table:
    """n rows with the real SCHEMA: columns' Arrow arrays as they are, plain values repeated;
    what columns lacks, from ROW (an ok flashinfer row) else make_row's default."""
    defaults = {**make_row(), **ROW, **columns}
    return pa.Table.from_arrays([_column(defaults[f.name], n, f.type) for f in SCHEMA], schema=SCHEMA)


def _column(value, n: int, type_: pa.DataType) -> pa.Array:
    return value if isinstance(value, (pa.Array, pa.ChunkedArray)) else _const(value, n, type_)


def _set(table: pa.Table, row: int, column: str, value) -> pa.Table:
    idx = table.schema.get_field_index(column)
    arr = table.column(column).combine_chunks()
    mask = pa.array(np.arange(len(table)) == row)
    return table.set_column(idx, column, pc.if_else(mask, pa.scalar(value, arr.type), arr))


def inject(table: pa.Table, slot: int) -> pa.Table:
    """Trouble in the first shard of slot 0 of the last run (see the module docstring)."""
    if slot != 0:
        return table
    for k in range(DIFFS):  # rows far apart, each another request
        table = _set(table, 1 + 7919 * k % len(table), "out_digest", f"{k:032x}")
    table = _set(table, 2, "plan", OTHER_PLAN)  # same digest, another plan: a note
    table = _set(table, 3, "plan", OTHER_PLAN)
    table = _set(table, 3, "lse_digest", "f" * 32)  # another plan, another digest: explained
    return table.slice(0, len(table) - 1)  # one missing row: the shard's last


def generate(root: str, rows: int, runs: int = 1) -> list:
    store, spec_data = RunStore(root), spec_for(rows)
    spec = spec_from_dict(spec_data)
    nreq = len(spec.members(next(iter(spec.cases))))  # batch-invariant: a digest per request
    out_d, lse_d = _digests(nreq, "out"), _digests(nreq, "lse")
    ids = []
    for r in range(runs):
        run_id = f"scale-{r:02d}"
        store.create_run(run_id, spec_data, SLOTS)
        for i, shard in enumerate(shards(spec, SLOTS)):
            table = shard_table(spec, shard, run_id, out_d, lse_d)
            if r == runs - 1 and i == 0:
                table = inject(table, shard.slot)
            path = store._p(run_id, "rows", f"part-{shard.shard_id}.parquet")
            store.fs.create_dir(store._p(run_id, "rows"), recursive=True)
            pq.write_table(table, path, compression="zstd", filesystem=store.fs)
        store.finish_run(run_id, "complete")
        ids.append(run_id)
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows per run (rounded to the spec)")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    t = time.perf_counter()
    ids = generate(args.root, args.rows, args.runs)
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in
                (p for i in ids for p in RunStore(args.root).row_files(i)))
    print(f"wrote {total} rows in {len(ids)} run(s) under {args.root} in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
