"""Input draws of a job on CPU threads vs one thread: the seconds a task spends drawing its requests' values.

    python bench/draws_bench.py [--job bench/jobs/sweep10k.yaml] [--scale 0.2] [--threads N]

Each value set (a request's q, k or v, a prefix's k or v) has its own seeded CPU generator, so sets drawn
side by side on threads have the bits of serial draws: the script checks every set's bytes. Cases are
taken in order, the next case's sets started while this case's are taken (as a task does); the values are kept (bf16
on the host: ~2 GB at the default scale) and hashed after the clock stops. Prints seconds and the ratio of
this one run.
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


def draw_all(spec, threads: int) -> tuple:
    """(seconds, {set: hash of its bytes}, values) drawing every case's sets in case order, one case ahead;
    the bytes are hashed after the clock stops."""
    draws = Draws(spec, "cpu", threads)
    cases = list(spec.cases)
    start = time.perf_counter()
    for i, case in enumerate(cases):
        draws.prefetch(draw_keys(spec, case))
        if i + 1 < len(cases):
            draws.prefetch(draw_keys(spec, cases[i + 1]))
        for key in draw_keys(spec, case):
            draws(*key)
    seconds = time.perf_counter() - start
    draws.close()
    hashes = {key: hashlib.blake2b(t.view(torch.int16).numpy().tobytes(), digest_size=16).hexdigest()
              for key, t in draws.cache.items()}
    return seconds, hashes, sum(t.numel() for t in draws.cache.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", default=JOB)
    ap.add_argument("--scale", type=float, default=0.2, help="times the sweep generators' case counts")
    ap.add_argument("--threads", type=int, default=draw_threads(), help="draw threads (default: a task's)")
    args = ap.parse_args()
    spec = spec_from_dict(scaled(yaml.safe_load(Path(args.job).read_text()), args.scale), args.job)
    one, serial, values = draw_all(spec, 1)
    many, threaded, _ = draw_all(spec, args.threads)
    same = serial == threaded
    print(f"{args.job} x{args.scale}: {len(spec.cases)} cases, {len(serial)} value sets, {values / 1e9:.2f} G values")
    print(f"one thread {one:.2f} s ({values / one / 1e9:.2f} G values/s); {args.threads} threads {many:.2f} s: "
          f"{one / many:.2f}x; same bits: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
