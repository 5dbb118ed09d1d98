"""The host's time a shard task's cell watchdog costs per cell: faulthandler armed before every cell (the way
before) against CellWatchdog (armed once per REARM_S), each over the same cells of `--cell-ms` of busy host
work; prints each per cell and as a share of the cell, and the saving, measured in this one run.

    python bench/watchdog_cost.py                  # 4,000 cells of 1.5 ms (the sweep's kernel)
    python bench/watchdog_cost.py --cells 2000 --cell-ms 0.5
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from detrun.run.watchdog import CellWatchdog  # noqa: E402


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def per_cell(arm, cells: int, cell_s: float) -> float:
    """Seconds per cell over and above the cell's own work: the arming's share, and the loop's."""
    start = time.perf_counter()
    for _ in range(cells):
        arm()
        busy(cell_s)
    return (time.perf_counter() - start) / cells - cell_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=4000)
    ap.add_argument("--cell-ms", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cell_s = args.cell_ms / 1e3
    before, now, none = [], [], []
    for _ in range(args.rounds):  # interleaved
        none.append(per_cell(lambda: None, args.cells, cell_s))
        before.append(per_cell(lambda: faulthandler.dump_traceback_later(300, exit=True), args.cells, cell_s))
        faulthandler.cancel_dump_traceback_later()
        dog = CellWatchdog(300)
        now.append(per_cell(dog.before_cell, args.cells, cell_s))
        dog.stop()
    base = sorted(none)[len(none) // 2]  # the loop's own cost: subtracted from both
    b, n = sorted(before)[len(before) // 2] - base, sorted(now)[len(now) // 2] - base
    print(f"{os.cpu_count()} CPUs, {args.cells} cells of {args.cell_ms} ms busy host work, {args.rounds} rounds")
    print(f"faulthandler armed per cell (before): {b * 1e6:.1f} us per cell ({b / cell_s:.1%} of the cell); rounds "
          + ", ".join(f"{x * 1e6:.1f}" for x in before))
    print(f"CellWatchdog (armed once per second): {n * 1e6:.1f} us per cell ({n / cell_s:.1%}); rounds "
          + ", ".join(f"{x * 1e6:.1f}" for x in now))
    print(f"saved per cell: {(b - n) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
