"""Runner overhead: wall time of a whole submit vs the kernel time (CUDA events) its tasks recorded.

    python bench/overhead.py jobs/paged.yaml [--address auto] [--set flashinfer.profile_kernels=false]

Prints the stage breakdown (`detrun timings RUN` prints the same for any stored run).
"""

import argparse
import time

from rich.console import Console

from detrun.present.render import print_timings
from detrun.run import runner
from detrun.spec.model import load_spec
from detrun.stages import KERNEL_ROW, PROFILE_START, PROFILE_STOP, run_breakdown
from detrun.store.runs import RunStore


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job")
    ap.add_argument("--address")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--runs-root", default="runs-bench")
    args = ap.parse_args()
    t0 = time.perf_counter()
    gpus = runner.connect(args.address)
    t1 = time.perf_counter()
    store = RunStore(args.runs_root)
    result = runner.submit(load_spec(args.job, args.overrides), store, gpus)
    t2 = time.perf_counter()
    rows, tasks_wall, steady = run_breakdown(store, result.run_id)
    print_timings(rows, tasks_wall, steady, Console(highlight=False, width=120))
    kernel = sum(s for name, s, _ in rows if name == KERNEL_ROW)
    warm = sum(s for name, s, _ in rows if name in ("graph warm-up", "profile", PROFILE_START, PROFILE_STOP))
    total = t2 - t0
    print(f"{args.job} {' '.join(args.overrides)}: ray connect {t1 - t0:.2f} s, submit {t2 - t1:.2f} s, "
          f"gpus {gpus}, shards {result.shards_run}")
    print(f"kernel time {kernel:.3f} s = {100 * kernel / total:.2f}% of wall {total:.2f} s "
          f"(overhead {100 * (total - kernel) / total:.1f}% of wall, "
          f"{(total - kernel) / max(kernel, 1e-9):.1f}x kernel); "
          f"extra runs detrun makes (graph warm-up, profiled run) {warm:.3f} s")


if __name__ == "__main__":
    main()
