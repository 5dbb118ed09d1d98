"""The host time a shard task spends per steady cell on its own bookkeeping (worker.py's `_cell` around the cell's
run: the steady parts' seconds, the steady trace, the marks), with the cell's run itself stubbed out:

    python bench/steady_bookkeeping.py [--cells 100000] [--rounds 3]
    PYTHONPATH=/tmp/old python bench/steady_bookkeeping.py     # another tree's detrun (e.g. git archive REV detrun)

Prints microseconds per steady cell per round, their median, and that as a share of the sweep's 1.5 ms kernel.
"""

import argparse
import statistics
import sys
import time
from types import SimpleNamespace

from detrun.run.worker import ShardRunner
from detrun.stages import STEADY_PARTS, Stages, SteadyTrace

KERNEL_MS = 1.5  # bench/jobs/sweep10k.yaml's steady cell on an H100 or H200


def per_cell_us(cells: int) -> float:
    stages = Stages()
    for part in STEADY_PARTS:
        stages.add(part, 0.001)
    runner = SimpleNamespace(stages=stages, trace=SteadyTrace(stages), since=None, before=None)
    runner._mark = ShardRunner._mark.__get__(runner)
    runner._profile_window = lambda repeat: None
    runner._run_cell = lambda cell, batches: True  # launched and steady
    cell, run = SimpleNamespace(repeat=1), ShardRunner._cell
    start = time.perf_counter()
    for _ in range(cells):
        run(runner, cell, {})
    return 1e6 * (time.perf_counter() - start) / cells


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return int(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=_positive, default=100_000)
    ap.add_argument("--rounds", type=_positive, default=3)
    args = ap.parse_args()
    rounds = [per_cell_us(args.cells) for _ in range(args.rounds)]
    median = statistics.median(rounds)
    print(f"detrun from {sys.modules['detrun'].__file__}")
    print(f"rounds: {', '.join(f'{r:.2f}' for r in rounds)} us per steady cell")
    share = 100 * median / (1000 * KERNEL_MS)
    print(f"median {median:.2f} us per steady cell: {share:.2f}% of a {KERNEL_MS} ms kernel")
    return 0


if __name__ == "__main__":
    sys.exit(main())
