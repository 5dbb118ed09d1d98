"""Pinned host memory for the drawn value sets, never allocated while a CUDA graph is captured.

A set drawn into pinned memory on a CPU thread moves to the device without holding the task's thread (a copy from
pageable memory blocks it: 1.3-1.4 s of the sweep's first repeat on two H100s). A pinned allocation from another
thread during a global-mode capture (cudaHostAlloc, the caching allocator's event queries) is an unsafe call that
invalidates the capture, so allocations share GATE and a capture holds it alone.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Tuple

import torch


class Gate:
    """Many holders at once (shared) or one alone; one waiting to be alone stops new shared holders."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared, self._alone, self._waiting = 0, False, 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._alone and not self._shared)
            self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()


GATE = Gate()  # one per process: every capture and every pinned allocation of it


def pinned_empty(shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised pinned host tensor, allocated outside any capture."""
    with GATE.shared():
        return torch.empty(shape, dtype=dtype, pin_memory=True)


def release() -> int:
    """Give the pinned blocks the caching host allocator keeps (their copies done) back to the system; the MiB
    it held at its peak in this process (0 where it has no CUDA context)."""
    if not torch.cuda.is_initialized():
        return 0
    stats: dict = getattr(torch.cuda, "host_memory_stats", dict)()
    empty = getattr(torch.accelerator, "empty_host_cache", None) or getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:  # torch.accelerator's from torch 2.12, torch._C's before
        with GATE.alone():
            empty()
    return int(stats.get("allocated_bytes.peak", 0)) >> 20
