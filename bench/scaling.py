"""Scheduling cost and throughput for 1, 2, 4 declared GPUs on a local Ray (no real GPU needed).

    python bench/scaling.py [--cpus 2] [--repeats 2]

Each GPU slot runs every cell of the spec (that is the gpu axis), so work grows with the slots:
rows/s should grow with them while each slot has a core. With --cpus 2, slots beyond 2 share the
cores (the runner gives each bundle min(1, CPUs/GPUs) CPU), so 4 declared GPUs measure scheduling
and sharing, not 4x compute. A warm-up submit (not timed) starts the Ray workers first.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")  # Ray workers import this checkout

import ray  # noqa: E402

from detrun import runner  # noqa: E402
from detrun.spec import spec_from_dict  # noqa: E402
from detrun.store import RunStore  # noqa: E402
from tests.helpers import small  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--slots", default="1,2,4")
    args = ap.parse_args()
    slots = [int(s) for s in args.slots.split(",")]
    ray.init("local", num_cpus=args.cpus, num_gpus=max(slots), include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    spec = spec_from_dict(small(modes=["eager"], repeats=args.repeats))
    store = RunStore(tempfile.mkdtemp(prefix="detrun-scaling-"))
    runner.submit(spec, store, max(slots), run_id="warmup")
    base = None
    print(f"{args.cpus} CPUs for Ray, spec 'small' (reference backend), repeats {args.repeats}")
    for n in slots:
        t = time.perf_counter()
        result = runner.submit(spec, store, n, run_id=f"gpus{n}")
        wall = time.perf_counter() - t
        rows = len(store.read_rows([result.run_id]))
        rate = rows / wall
        base = base or rate
        print(f"{n} declared GPU(s): {rows:4d} rows in {wall:5.2f} s = {rate:6.1f} rows/s, "
              f"speed-up {rate / base:4.2f}x (ideal {n}x; failures {len(result.failures)})")
    ray.shutdown()


if __name__ == "__main__":
    main()
