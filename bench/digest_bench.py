"""Digest cost: fused Triton kernel vs torch integer ops vs copy-to-host + blake2b, against a device copy.

    python bench/digest_bench.py            # on a GPU (CPU: the torch path and host hash only)

Prints GB/s and ratios measured in this one run, checks that both device paths give the same bits,
times one cell's digests at detrun's shapes, and what a fresh worker pays to import and load the kernel.
"""

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import time

import torch

from detrun.kernels.backends.base import timed
from detrun.kernels.digest import split_digests, split_lanes, tensor_bytes

FRESH = """
import time, torch
x = torch.ones(1 << 20, device="cuda", dtype=torch.bfloat16); torch.cuda.synchronize()  # CUDA context first
t0 = time.perf_counter(); import triton; t1 = time.perf_counter()
from detrun.kernels.digest import split_lanes
split_lanes(x, [0, x.shape[0]], impl="triton"); torch.cuda.synchronize(); t2 = time.perf_counter()
split_lanes(x, [0, x.shape[0]], impl="torch"); torch.cuda.synchronize(); t3 = time.perf_counter()
print(f"import triton {t1 - t0:.3f} s, first triton digest (compile or load the kernel) {t2 - t1:.3f} s, "
      f"first torch digest {t3 - t2:.3f} s")
"""


def median_ms(fn, device, reps=5):
    return statistics.median(timed(fn, device)[1] for _ in range(reps))


def main():
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    impls = ["torch", "triton"] if device.type == "cuda" else ["torch"]
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}")
    for mb in (16, 256, 1024):
        t = torch.randn(mb << 19, device=device).to(torch.bfloat16)  # mb MiB of bf16
        gb = t.numel() * 2 / 1e9
        bounds = [0, t.shape[0]]
        lanes = {impl: split_lanes(t, bounds, impl) for impl in impls}  # also the warm-up
        same = all(torch.equal(lanes["torch"], v) for v in lanes.values())
        ms = {impl: median_ms(lambda t=t, bounds=bounds, impl=impl: split_lanes(t, bounds, impl).cpu(), device)
              for impl in impls}
        host = median_ms(lambda t=t: hashlib.blake2b(tensor_bytes(t), digest_size=16).hexdigest(), device)
        copy = median_ms(lambda t=t: t.clone(), device)
        line = " | ".join(f"{impl} {gb / ms[impl] * 1e3:8.1f} GB/s" for impl in impls)
        fused = ms[impls[-1]]
        print(f"{mb:5d} MiB: {line} | host copy + blake2b {gb / host * 1e3:6.2f} GB/s"
              f" | d2d copy {gb / copy * 1e3:7.1f} GB/s"
              f" (read+write {2 * gb / copy * 1e3:7.1f}) | {impls[-1]} vs torch {ms['torch'] / fused:6.1f}x, vs host"
              f" {host / fused:6.1f}x, time vs copy {fused / copy:5.1f}x | bits equal: {same}")
        assert same, lanes
    # One cell's digests as the worker takes them: out and lse of every request, one host copy.
    for name, tokens, split in (("paged.yaml mixed", 909, [0, 9, 209, 909]),
                                ("long.yaml mixed", 6144, [0, 4096, 6144])):
        out = torch.randn(tokens, 32, 128, device=device).to(torch.bfloat16)
        lse = torch.randn(tokens, 32, device=device)
        times = []
        for impl in impls:
            os.environ["DETRUN_DIGEST"] = impl
            split_digests([out, lse], split)
            ms = median_ms(lambda o=out, s=lse, b=split: split_digests([o, s], b), device, 20)
            times.append(f"{impl} {ms:.3f} ms")
        os.environ.pop("DETRUN_DIGEST", None)
        print(f"one cell, {name} ({tokens} tokens, {len(split) - 1} requests, out+lse): {', '.join(times)}")
    if device.type == "cuda":
        env = dict(os.environ, TRITON_CACHE_DIR=f"/tmp/detrun-triton-cache-{os.getpid()}")
        for attempt in ("empty kernel cache", "kernel cached on disk"):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, env=env)
            print(f"fresh process ({attempt}): {out.stdout.strip() or out.stderr[-500:]}; "
                  f"whole process {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
