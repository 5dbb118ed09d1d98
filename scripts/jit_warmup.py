"""Compile FlashInfer's prefill modules once (timed) so Ray tasks find a warm JIT cache on disk."""

import os
import sys
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
    main(*sys.argv[1:])
