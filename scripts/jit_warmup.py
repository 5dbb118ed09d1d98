"""Compile FlashInfer's prefill modules once (timed) so Ray tasks find a warm JIT cache on disk.

    python3 scripts/jit_warmup.py [JOB]     # on the GPU machine (scripts/device_setup.sh's prepare_gpu runs it)

JOB (default jobs/paged.yaml) gives the shapes; DETRUN_JIT_BACKENDS (default "fa2 fa3") the FlashInfer
backends whose prefill module is built, one after the other.
"""

import argparse
import os
import time

import torch

from detrun.kernels.backends.flashinfer import FlashInferBackend
from detrun.kernels.inputs import build_batch
from detrun.spec.model import load_spec


def main(job: str = "jobs/paged.yaml") -> None:
    device = torch.device("cuda", 0)
    for backend in os.environ.get("DETRUN_JIT_BACKENDS", "fa2 fa3").split():
        spec = load_spec(job, [f"flashinfer.backend={backend}", f"flashinfer.ragged_backend={backend}"])
        be = FlashInferBackend(spec, device)
        batch = build_batch(spec, "prefix_alone", device)
        start = time.perf_counter()
        be.forward(batch, "eager")  # the first plan() builds the module (paged and ragged share it)
        print(f"JIT {backend} prefill module (bf16, hd{spec.head_dim}): {time.perf_counter() - start:.1f} s",
              flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job", nargs="?", default="jobs/paged.yaml", help="the job spec whose shapes are compiled")
    main(ap.parse_args().job)
