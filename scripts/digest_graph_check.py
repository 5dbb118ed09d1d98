"""A cell's digest launch from a CUDA graph (kernels/digest_graphs.py) on the GPU: the same digests as a plain
launch, a flipped bit and new values seen through a replay, cells in flight each on a graph of its own; then the
host's time per launch, plain against replayed, measured in this one run.

    python3 scripts/digest_graph_check.py      # on the GPU machine; exit 1 when a digest differs
"""

import argparse
import statistics
import sys
import time

import torch

from detrun.kernels import digest
from detrun.kernels.digest import PendingDigests, split_digests
from detrun.kernels.digest_graphs import DigestGraphs
from detrun.stages import DIGEST_CAPTURE, DIGEST_REPLAY, Stages

BOUNDS = [0, 1024, 1100, 1800, 2300, 4096]  # a sweep cell's requests (rows), and each one's last row
ROWS = [b - 1 for b in BOUNDS[1:]]


def launch_us(make, n: int = 400, depth: int = 4) -> float:
    """Median host microseconds to launch a cell's digests, `depth` cells in flight as a task keeps them."""
    times, flight = [], []
    for _ in range(n):
        start = time.perf_counter()
        flight.append(make())
        times.append((time.perf_counter() - start) * 1e6)
        if len(flight) > depth:
            flight.pop(0).names()
    for p in flight:
        p.names()
    return statistics.median(times[n // 4:])


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if not torch.cuda.is_available():
        print("no GPU here: nothing to check")
        return 2
    dev = torch.device("cuda", 0)
    digest.prewarm(dev)
    digest.ready()
    if digest.implementation(torch.empty(1, device=dev)) != "triton":
        print(f"the Triton digest kernel is not in use here ({digest._failed}): nothing to check")
        return 2
    gen = torch.Generator(device=dev).manual_seed(0)
    out = torch.randn(BOUNDS[-1], 32, 128, device=dev, generator=gen).to(torch.bfloat16)
    lse = torch.randn(BOUNDS[-1], 32, device=dev, generator=gen)
    stages, bad = Stages(), []
    graphs = DigestGraphs(dev, stages)
    side = torch.cuda.Stream(dev, priority=0)  # the task's digest stream

    def pending():
        return PendingDigests([out, lse], BOUNDS, ROWS, graphs)

    def check(what: str, names) -> None:
        plain = split_digests([out, lse], BOUNDS, ROWS)
        ok = names == plain
        print(f"{what}: {'same digests as a plain launch' if ok else 'DIFFERENT from a plain launch'}")
        if not ok:
            bad.append(what)

    with torch.cuda.stream(side):
        for i in range(3):
            check(f"launch {i + 1} ({'plain' if i == 0 else 'graph'})", pending().names())
        before = split_digests([out, lse], BOUNDS, ROWS)
        out.view(torch.int16)[1500, 7, 3] ^= 1  # request 2
        flipped = pending()
        names = flipped.names()
        check("one bit flipped, replayed", names)
        moved = [i for i, (a, b) in enumerate(zip(before[0], names[0])) if a != b]
        print(f"  output digests that changed: {moved} (request 2 only: {moved == [2]})")
        if moved != [2]:
            bad.append("flip")
        out.copy_(torch.randn(out.shape, device=dev, generator=gen))
        lse.copy_(torch.randn(lse.shape, device=dev, generator=gen))
        check("new values in place, replayed", pending().names())
        flight = [pending() for _ in range(5)]  # none read yet: each on a graph of its own
        for i, p in enumerate(flight):
            check(f"in flight, cell {i + 1} of 5", p.names())
        print(f"captures {stages.counts[DIGEST_CAPTURE]}, replays {stages.counts[DIGEST_REPLAY]}, "
              f"failed: {graphs.failed}")
        plain_us = launch_us(lambda: PendingDigests([out, lse], BOUNDS, ROWS))
        graph_us = launch_us(pending)
        plain_again = launch_us(lambda: PendingDigests([out, lse], BOUNDS, ROWS))
    torch.cuda.synchronize(dev)
    print(f"host per cell's digest launch: plain {plain_us:.1f} us, then {plain_again:.1f} us; "
          f"from a graph {graph_us:.1f} us ({graph_us / plain_us:.2f}x)")
    print("digest graphs:", "FAILED " + ", ".join(bad) if bad else "the same bits as plain launches")
    return 1 if bad or graphs.failed else 0


if __name__ == "__main__":
    sys.exit(main())
