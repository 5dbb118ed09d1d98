"""Scheduling cost and throughput for 1, 2, 4 declared GPUs on a local Ray (no real GPU needed).

    python bench/scaling.py [--cpus 2] [--repeats 2]
    RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1 python bench/scaling.py --job jobs/paged.yaml --cpus 16

With --job, that spec runs (flashinfer on a GPU machine); declaring more GPUs than the machine has,
with Ray told not to set CUDA_VISIBLE_DEVICES, puts every slot on GPU 0: concurrent tasks sharing one
GPU, whose rows are then compared (the gpu axis must still be bitwise equal).

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

from detrun.judge.compare import compare_runs  # noqa: E402
from detrun.judge.findings import judge  # noqa: E402
from detrun.run import runner  # noqa: E402
from detrun.spec.model import load_spec, spec_from_dict  # noqa: E402
from detrun.store.runs import RunStore  # noqa: E402
from tests.helpers import small  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--slots", default="1,2,4")
    ap.add_argument("--job", help="a job spec to run instead of the small reference spec")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    args = ap.parse_args()
    slots = [int(s) for s in args.slots.split(",")]
    ray.init("local", num_cpus=args.cpus, num_gpus=max(slots), include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    if args.job:
        spec = load_spec(args.job, args.overrides)
    else:
        spec = spec_from_dict(small(modes=["eager"], repeats=args.repeats))
    store = RunStore(tempfile.mkdtemp(prefix="detrun-scaling-"))
    runner.submit(spec, store, max(slots), run_id="warmup")
    base = None
    noset = os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "")
    print(f"{args.cpus} CPUs for Ray, spec {spec.name!r}, repeats {spec.repeats} "
          f"({spec.repeats_per_task or spec.repeats} per task)"
          f"{', CUDA_VISIBLE_DEVICES not set by Ray' if noset else ''}")
    for n in slots:
        t = time.perf_counter()
        result = runner.submit(spec, store, n, run_id=f"gpus{n}")
        wall = time.perf_counter() - t
        table = store.read_rows([result.run_id])
        rows = len(table)
        rate = rows / wall
        base = base or rate
        verdict = judge(compare_runs(store, [result.run_id]))
        backends = sorted(set(table.column("backend").to_pylist()))
        devices = len(set(table.column("gpu_uuid").to_pylist()))
        print(f"{n} declared GPU(s): {rows:4d} rows in {wall:5.2f} s = {rate:6.1f} rows/s, "
              f"speed-up {rate / base:4.2f}x (ideal {n}x; failures {len(result.failures)}); "
              f"backend {'+'.join(backends)}, {devices} distinct device(s), compare exit {int(verdict.exit_code)}")
    ray.shutdown()


if __name__ == "__main__":
    main()
