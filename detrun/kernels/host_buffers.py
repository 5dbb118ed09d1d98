"""Host memory a task's CPU draws write into, used again instead of allocated per value set.

A fresh tensor of a large set (a 16k-token prefix: 67 MB in fp32) is a fresh mapping: every page faults on its
first write and is unmapped at its free, and eight draw threads doing that contend on the process's memory map.
`Scratch` is one float32 buffer per thread that torch's generator fills; `HostBuffers` keeps the dtype buffers the
sets are rounded into, taken back once their values are on the device (docs/performance.md, "Input draws into
buffers used again").
"""

from __future__ import annotations

import math
import threading
from typing import List, Tuple

import torch


class Scratch:
    """One float32 buffer per thread, grown to the largest set that thread drew: a view of its start."""

    def __init__(self) -> None:
        self.local = threading.local()

    def take(self, shape: Tuple[int, ...]) -> torch.Tensor:
        numel = math.prod(shape)
        buf = getattr(self.local, "buf", None)
        if buf is None or buf.numel() < numel:
            buf = self.local.buf = torch.empty(numel, dtype=torch.float32)
        return buf[:numel].view(shape)


class HostBuffers:
    """Byte buffers for the sets' values: take() gives the smallest free one that fits (or a new one), give()
    takes one back whose values have left it, keeping at most `keep_bytes` free."""

    def __init__(self, keep_bytes: int) -> None:
        self.keep_bytes = keep_bytes
        self.free: List[torch.Tensor] = []  # flat uint8 buffers, smallest first
        self.lock = threading.Lock()
        self.reused = 0  # sets written into a buffer given back (for the bench and the tests)

    def take(self, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        size = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        with self.lock:
            fit = next((i for i, buf in enumerate(self.free) if buf.numel() >= size), None)
            buf = self.free.pop(fit) if fit is not None else None
            self.reused += buf is not None
        if buf is None:
            buf = torch.empty(size, dtype=torch.uint8)
        return buf[:size].view(dtype).view(shape)

    def give(self, values: torch.Tensor) -> None:
        """Take back the buffer under `values` (a tensor take() gave): its values are not read again."""
        buf = torch.empty(0, dtype=torch.uint8).set_(values.untyped_storage())
        with self.lock:
            if sum(b.numel() for b in self.free) + buf.numel() <= self.keep_bytes:
                self.free.append(buf)
                self.free.sort(key=lambda b: b.numel())
