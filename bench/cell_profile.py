"""Where a steady-state cell's time goes, in one process (no Ray): wall per cell, then the same cells
under cProfile (host functions) and under torch.profiler (device kernels and how busy the GPU was).

    python bench/cell_profile.py bench/jobs/long.yaml [--set k=v ...] [--repeats 8] [--code DIR]

The first repeat of every case, phase and mode is the warm-up (inputs, capture, kernel profile) and is not
counted; the later repeats are steady state, as `detrun timings` counts them.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --code DIR: time the detrun package of another checkout (the code before a change, say)
CODE = os.path.abspath(sys.argv[sys.argv.index("--code") + 1]) if "--code" in sys.argv[:-1] else ROOT
sys.path.insert(0, CODE)

import torch  # noqa: E402

from detrun.run.worker import ShardRunner  # noqa: E402
from detrun.spec.matrix import Shard, cells_for  # noqa: E402
from detrun.spec.model import load_spec  # noqa: E402


def run_cells(runner: ShardRunner, spec, repeats, batches) -> int:
    n = 0
    for cell in cells_for(spec, tuple(repeats)):
        runner._cell(cell, batches)
        n += 1
    flush = getattr(runner, "_flush", None)  # the code before the overlapped digests had none
    if flush:
        flush()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--repeats", type=int, default=8, help="steady repeats per phase")
    ap.add_argument("--code", default=ROOT, help="the checkout whose detrun package runs (default: this one)")
    args = ap.parse_args()
    spec = load_spec(args.job, args.overrides)
    os.environ.update(spec.env)  # what Ray's runtime_env does for a task
    r = args.repeats
    runner = ShardRunner(spec, Shard(0, tuple(range(1 + 3 * r))), "cell-profile")
    batches: dict = {}
    run_cells(runner, spec, [0], batches)  # warm-up: inputs, graphs, kernel profile

    kernel0 = runner.stages.seconds.get("kernel", 0.0)
    t = time.perf_counter()
    n = run_cells(runner, spec, range(1, 1 + r), batches)
    wall = (time.perf_counter() - t) / n * 1e3
    kernel = (runner.stages.seconds.get("kernel", 0.0) - kernel0) / n * 1e3
    print(f"code {CODE}")
    print(f"{args.job} {' '.join(args.overrides)}: {n} steady cells, {wall:.3f} ms per cell, kernel {kernel:.3f} ms, "
          f"overhead {100 * (wall - kernel) / max(kernel, 1e-9):.1f}% of kernel time ({runner.backend_name})")

    prof = cProfile.Profile()
    prof.enable()
    n = run_cells(runner, spec, range(1 + r, 1 + 2 * r), batches)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    print(f"cProfile, {n} cells (times are for all of them; cProfile slows Python down):")
    print("\n".join(text.getvalue().splitlines()[:45]))

    from torch.profiler import ProfilerActivity, profile

    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        n = run_cells(runner, spec, range(1 + 2 * r, 1 + 3 * r), batches)
    wall = (time.perf_counter() - t) * 1e3
    events = p.key_averages()
    if not torch.cuda.is_available():
        print(events.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60))
        return
    busy = sum(e.self_device_time_total for e in events) / 1e3
    print(f"torch.profiler, {n} cells: wall {wall / n:.3f} ms per cell (profiled), device busy {busy / n:.3f} ms "
          f"per cell ({100 * busy / wall:.1f}%)")
    print(events.table(sort_by="self_device_time_total", row_limit=15, max_name_column_width=60))


if __name__ == "__main__":
    main()
