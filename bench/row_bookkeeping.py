"""The host's bookkeeping per steady cell after its digests are back: digest names, digest columns, rows.

    python bench/row_bookkeeping.py [bench/jobs/sweep10k.yaml] [--code DIR] [--cells 200] [--rounds 5]

The sweep's prefill cells, each with its requests' row bounds, stand-in lanes (random: the names' cost does
not depend on the values) and a stand-in plan; a ShardRunner of the job (its backend built, no cell run) writes them.
Prints microseconds per cell for this code and, with --code DIR (the code before a change, from a checkout
that has `digest._heads`), for that code in a second process, and the ratio. No GPU work: the same host work runs on a
GPU worker's thread (run on a GPU machine, it times that host's CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(job: str, cells: int, rounds: int) -> dict:
    """Microseconds per cell of names(), _fields() and _rows() in the detrun on sys.path."""
    import torch

    from detrun.kernels import digest
    from detrun.kernels.backends.base import Output
    from detrun.run.worker import ShardRunner
    from detrun.spec.matrix import Shard, cells_for
    from detrun.spec.model import load_spec

    spec = load_spec(job)
    runner = ShardRunner(spec, Shard(slot=0, repeats=(1,)), "bench")
    chosen = [c for c in cells_for(spec, (1,)) if c.phase == "prefill"][:cells]
    plan = {"cta_tile_q": 128, "split_kv": True, "padded_batch_size": 264, "total_num_rows": 5120,
            "kv_chunk_size": 1024}
    kernels = ["void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>", "void flashinfer::MergeStates<...>"]
    spent = {"names": 0.0, "fields": 0.0, "rows": 0.0}
    gen = torch.Generator().manual_seed(0)
    for _ in range(rounds):
        for cell in chosen:
            n = len(spec.members(cell.case))
            bounds = [64 * i for i in range(n + 1)]
            out, lse = torch.zeros(bounds[-1], 4, 8, dtype=torch.bfloat16), torch.zeros(bounds[-1], 4)
            output = Output(out=out, lse=lse, path="paged", attn="fa2", plan=plan, kernels=kernels, plan_ms=0.4)
            pending = digest.PendingDigests([], bounds)  # no launch: its lanes are set below, as if copied back
            pending.heads = [digest._heads(digest.dtype_name(t), tuple(t.shape[1:]), tuple(bounds),
                                           tuple(b - 1 for b in bounds[1:])) for t in (out, lse)]
            pending.host = torch.randint(0, 2**62, (4 * n, 2), dtype=torch.int64, generator=gen)
            t0 = time.perf_counter()
            names = pending.names()
            t1 = time.perf_counter()
            fields = runner._fields(bounds, output, names)
            t2 = time.perf_counter()
            runner._rows(cell, "ok", output=output, digests=fields)
            t3 = time.perf_counter()
            spent["names"] += t1 - t0
            spent["fields"] += t2 - t1
            spent["rows"] += t3 - t2
    count = rounds * len(chosen)
    result = {k: 1e6 * v / count for k, v in spent.items()}
    result["total"] = sum(result.values())
    result["cells"] = count
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", nargs="?", default=os.path.join(ROOT, "bench/jobs/sweep10k.yaml"))
    parser.add_argument("--code", default="", help="another checkout's code (holding detrun/), timed too")
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one code, one JSON line
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.job, args.cells, args.rounds)))
        return
    results = {}
    for label, code in (("this code", ROOT), ("--code", args.code)):
        if not code:
            continue
        paths = [os.path.abspath(code), os.environ.get("PYTHONPATH", "")]  # the code first, then what was there
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
        out = subprocess.run([sys.executable, os.path.abspath(__file__), args.job, "--cells", str(args.cells),
                              "--rounds", str(args.rounds), "--json"], env=env, cwd=os.path.abspath(code),
                             check=True, capture_output=True, text=True).stdout
        results[label] = json.loads(out.strip().splitlines()[-1])
        r = results[label]
        print(f"{label:10} ({code}): {r['cells']} cells, us per cell: names {r['names']:.1f}, "
              f"digest columns {r['fields']:.1f}, rows {r['rows']:.1f}, total {r['total']:.1f}")
    if len(results) == 2:
        print(f"this code / --code: {results['this code']['total'] / results['--code']['total']:.2f}")


if __name__ == "__main__":
    main()
