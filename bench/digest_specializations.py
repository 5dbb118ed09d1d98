"""How many times the digest kernel compiles in a fresh process, and what each first call costs.

    TRITON_CACHE_DIR=$(mktemp -d) python bench/digest_specializations.py     # on a GPU

A worker digests outputs (bf16) and LSEs (fp32) of batches of many sizes: that must be two kernels,
loaded once by digest.prewarm, not one per batch shape.
"""

import argparse
import os
import time

import torch

from detrun.kernels import digest
from detrun.kernels.digest_triton import _lanes_kernel


def main():
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    dev = torch.device("cuda")
    t0 = time.perf_counter()
    digest.prewarm(dev)
    digest.ready()
    cache = os.environ.get("TRITON_CACHE_DIR", "default")
    print(f"prewarm + ready: {time.perf_counter() - t0:.3f} s (cache dir {cache})")
    for tokens, bounds in ((200, [0, 200]), (909, [0, 9, 209, 909]), (216, [0, 200] + list(range(201, 217))),
                           (145, [0, 9, 129, 145]), (6144, [0, 4096, 6144])):
        out = torch.randn(tokens, 32, 128, device=dev).to(torch.bfloat16)
        lse = torch.randn(tokens, 32, device=dev)
        t = time.perf_counter()
        got = digest.split_digests([out, lse], bounds)
        ms = (time.perf_counter() - t) * 1e3
        assert got == [[digest.tensor_digest(x[a:b].clone()) for a, b in zip(bounds, bounds[1:])] for x in (out, lse)]
        ref = [digest.split_lanes(x, bounds, "torch") for x in (out, lse)]
        assert all(torch.equal(r, digest.split_lanes(x, bounds, "triton")) for r, x in zip(ref, (out, lse)))
        print(f"{tokens:5d} tokens, {len(bounds) - 1:2d} requests: first split_digests {ms:7.2f} ms, "
              "bits equal to torch")
    compiled = sum(len(c[0]) for c in _lanes_kernel.device_caches.values())
    print(f"compiled specialisations of the kernel in this process: {compiled}")


if __name__ == "__main__":
    main()
