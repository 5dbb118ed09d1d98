"""Digest cost: on-device digest vs copy-to-host + hash, against a device-to-device copy.

    python bench/digest_bench.py            # on a GPU (falls back to CPU)
Prints GB/s and ratios measured in this one run.
"""

import hashlib
import statistics
import time

import torch

from detrun.digest import tensor_bytes, tensor_digest


def clock(fn, device, reps=5):
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}")
    for mb in (16, 256, 1024):
        t = torch.randn(mb << 19, device=device).to(torch.bfloat16)  # mb MiB of bf16
        gb = t.numel() * 2 / 1e9
        tensor_digest(t)  # warm up
        dev = clock(lambda: tensor_digest(t), device)
        host = clock(lambda: hashlib.blake2b(tensor_bytes(t), digest_size=16).hexdigest(), device)
        copy = clock(lambda: t.clone(), device)
        print(f"{mb:5d} MiB: device digest {gb / dev:7.1f} GB/s | copy to host + blake2b {gb / host:6.2f} GB/s "
              f"| d2d copy {gb / copy:7.1f} GB/s | device/host speed-up {host / dev:6.1f}x "
              f"| digest vs copy time {dev / copy:5.1f}x")


if __name__ == "__main__":
    main()
