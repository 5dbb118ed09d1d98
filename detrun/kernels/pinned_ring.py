"""A fixed ring of pinned host memory that the draw threads write value sets into, so that a set's move to the
device is one queued copy at pinned speed, not a blocking copy from pageable memory.

The ring is allocated once, when the task starts. No set needs a cudaHostAlloc of its own, and none runs beside
a CUDA graph capture: a global-mode capture forbids another thread's cudaHostAlloc. The task's threads reserve
space, in order. The draw threads never do; they do CPU work only. A block is given back once the copy that read
it has finished on the device (its event). A set that finds no room is drawn into pageable memory and copied as
before.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any, Callable, Deque, Optional, Tuple

import torch

ALIGN = 512  # bytes: each block starts on this boundary


def block_bytes(numel: int, dtype: torch.dtype) -> int:
    """The bytes a block of numel values takes in the ring (whole ALIGNs)."""
    return -(-numel * dtype.itemsize // ALIGN) * ALIGN


@dataclass
class Block:
    start: int
    end: int
    fence: Any = None  # the event recorded after the copy that reads the block (None: not yet copied)


class PinnedRing:
    """Blocks of one host buffer, reserved in order and given back in order once their copies are done."""

    def __init__(self, nbytes: int, pinned: bool = True, new_event: Callable[[], Any] = torch.cuda.Event):
        self.buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        self.size, self.head = nbytes, 0
        self.blocks: Deque[Block] = collections.deque()  # reserved, oldest first
        self.new_event = new_event
        self.lock = threading.Lock()

    def reserve(self, shape: Tuple[int, ...], dtype: torch.dtype) -> Optional[Tuple[Block, torch.Tensor]]:
        """Room for a tensor of this shape and dtype: its block and a view of it; None when there is none."""
        numel = torch.Size(shape).numel()
        nbytes = block_bytes(numel, dtype)
        with self.lock:
            self._reclaim()
            start = self._fit(nbytes)
            if start is None:
                return None
            block = Block(start, start + nbytes)
            self.blocks.append(block)
            self.head = block.end
        return block, self.buffer[start:start + numel * dtype.itemsize].view(dtype).view(shape)

    def fence(self, block: Block) -> None:
        """The copy reading the block is queued on the current stream: the block is free once it is done."""
        event = self.new_event()
        event.record()
        with self.lock:
            block.fence = event

    def _reclaim(self) -> None:
        """Give back the oldest blocks whose copies are done."""
        while self.blocks and self.blocks[0].fence is not None and self.blocks[0].fence.query():
            self.blocks.popleft()
        if not self.blocks:
            self.head = 0

    def _fit(self, nbytes: int) -> Optional[int]:
        """Where a block of nbytes starts: at the head, or at 0 once the head is past the oldest block."""
        if not self.blocks:
            return 0 if nbytes <= self.size else None
        tail = self.blocks[0].start
        if self.head > tail:  # the used bytes are [tail, head): room after head, else from 0 up to tail
            if self.head + nbytes <= self.size:
                return self.head
            return 0 if nbytes <= tail else None
        return self.head if self.head + nbytes <= tail else None  # wrapped: room between head and tail
