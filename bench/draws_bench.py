"""Input draws of a job on CPU threads vs one thread: the seconds a task spends drawing its requests' values.

    python bench/draws_bench.py [--job bench/jobs/sweep10k.yaml] [--scale 0.2] [--threads N[,N...]] [--counter cuda]

Each value set (a request's q, k or v, a prefix's k or v) has its own seeded CPU generator, so sets drawn
side by side on threads have the bits of serial draws: the script checks every set's bytes. Cases are
taken in order, the next case's sets started while this case's are taken (as a task does); the values are kept (bf16
on the host: ~2 GB at the default scale) and hashed after the clock stops. Prints seconds and the ratio of
this one run. --counter DEVICE also times `draws: counter` (every set made on DEVICE) and checks its bits
against the same draws on the CPU: every set of the first three cases and the largest set.
"""

import argparse
import hashlib
import sys
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from sweep_scale import JOB, scaled  # noqa: E402

from detrun.kernels.inputs import Draws, draw_keys, draw_threads  # noqa: E402
from detrun.spec.model import spec_from_dict  # noqa: E402


def draw_all(spec, threads: int, device: str = "cpu", cases=None) -> tuple:
    """(seconds, {set: hash of its bytes}, values) drawing every case's sets in case order, one case ahead;
    the bytes are hashed after the clock stops."""
    draws = Draws(spec, device, threads)
    cases = list(spec.cases) if cases is None else cases
    start = time.perf_counter()
    for i, case in enumerate(cases):
        draws.prefetch(draw_keys(spec, case))
        if i + 1 < len(cases):
            draws.prefetch(draw_keys(spec, cases[i + 1]))
        for key in draw_keys(spec, case):
            draws(*key)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    draws.close()
    hashes = {key: _hash(t) for key, t in draws.cache.items()}
    return seconds, hashes, sum(t.numel() for t in draws.cache.values())


def _hash(t: torch.Tensor) -> str:
    return hashlib.blake2b(t.cpu().view(torch.int16).numpy().tobytes(), digest_size=16).hexdigest()


def counter_check(spec, device: str, cpu_s: float) -> bool:
    """draws: counter on `device`, timed (a warm-up case first), its bits against the CPU's for every set of the
    first three cases and for the largest set."""
    counter = spec.model_copy(update={"draws": "counter"})
    draw_all(counter, 1, device, list(spec.cases)[:1])  # the first launches' start-up, off the clock
    seconds, hashes, values = draw_all(counter, 1, device)
    _, on_cpu, _ = draw_all(counter, 1, "cpu", list(spec.cases)[:3])
    sets = {(kind, name): (kind, name, n, h) for case in spec.cases for kind, name, n, h in draw_keys(spec, case)}
    largest = max(sets.values(), key=lambda key: key[2] * key[3])
    on_cpu[largest[:2]] = _hash(Draws(counter, "cpu")(*largest))
    same = all(hashes[k] == v for k, v in on_cpu.items())
    print(f"draws: counter on {device}: {seconds:.3f} s ({values / seconds / 1e9:.2f} G values/s), "
          f"{cpu_s / seconds:.2f}x the speed of the threaded CPU draws; same bits as on the CPU "
          f"({len(on_cpu)} sets, the largest {largest[2]} x {largest[3]} rows): {same}")
    return same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", default=JOB)
    ap.add_argument("--scale", type=float, default=0.2, help="times the sweep generators' case counts")
    ap.add_argument("--threads", default=str(draw_threads()),
                    help="draw threads, or several comma-separated, each timed (default: a task's)")
    ap.add_argument("--counter", metavar="DEVICE", help="also time draws: counter on DEVICE (e.g. cuda), bits checked")
    args = ap.parse_args()
    spec = spec_from_dict(scaled(yaml.safe_load(Path(args.job).read_text()), args.scale), args.job)
    one, serial, values = draw_all(spec, 1)
    print(f"{args.job} x{args.scale}: {len(spec.cases)} cases, {len(serial)} value sets, {values / 1e9:.2f} G values")
    same = True
    for threads in (int(n) for n in args.threads.split(",")):
        many, threaded, _ = draw_all(spec, threads)
        same = same and serial == threaded
        print(f"one thread {one:.2f} s ({values / one / 1e9:.2f} G values/s); {threads} threads {many:.2f} s: "
              f"{one / many:.2f}x; same bits: {serial == threaded}")
    if args.counter:
        same = counter_check(spec, args.counter, many) and same
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
