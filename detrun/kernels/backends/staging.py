"""Pinned host buffers for FlashInfer's plan(), a few per wrapper, so that planning the next cells does not
wait for the kernel that runs now.

plan() writes its schedule into the wrapper's pinned host buffer (`_pin_memory_int_workspace_buffer`) and
queues the copy to the wrapper's int workspace on the device behind the work already queued. That host
buffer may be rewritten only once the copy has run, i.e. once the kernels queued before it have. A ring of
pinned buffers per wrapper moves only this host-side staging: each plan() writes the next buffer, waiting
only for the copy queued from it `slots` plans ago. What the kernels read (the int workspace and every
device buffer) is the wrapper's one set, as in SGLang; the copies queue in stream order.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch

from ...stages import PLAN_WAIT, Stages

PINNED = "_pin_memory_int_workspace_buffer"  # FlashInfer 0.6-0.7: every prefill/decode wrapper's staging buffer


@dataclass
class _Ring:
    wrapper: object  # kept referenced: the ring is keyed by its id
    buffers: List[Optional[torch.Tensor]]
    fences: Dict[int, Any] = field(default_factory=dict)  # buffer -> an event after its last copy
    next: int = 0


class PlanStaging:
    """Rotates each wrapper's pinned staging buffer over `slots` buffers (1: the wrapper's own, with a
    fence); the extra buffers are allocated on a wrapper's first plans."""

    def __init__(self, stages: Stages, active: bool, new_fence: Callable[[], Any] = torch.cuda.Event,
                 new_buffer: Callable[[torch.Tensor], torch.Tensor] = lambda t: torch.empty_like(t, pin_memory=True),
                 device: Optional[torch.device] = None):
        """active: on a CUDA device (elsewhere plan() copies synchronously: nothing to stage); device: its
        current stream is looked up by device for the fences (cheaper than an event's default lookup)."""
        self.stages, self.active, self.new_fence, self.new_buffer = stages, active, new_fence, new_buffer
        self.device = device
        self.rings: Dict[int, _Ring] = {}
        self.waited = 0.0  # seconds the host waited for staging buffers (PLAN_WAIT)

    @contextlib.contextmanager
    def plan(self, wrapper, slots: int) -> Iterator[None]:
        """Around one plan() of wrapper: hand it a staging buffer free to write, and fence it afterwards. A
        wrapper without the known buffer keeps its own, fenced (its plan waits for its last copy)."""
        if not self.active:
            yield
            return
        own = getattr(wrapper, PINNED, None)
        ring = self.rings.get(id(wrapper))
        if ring is None:
            ring = self.rings[id(wrapper)] = _Ring(wrapper, [own])
        i = ring.next
        if i >= len(ring.buffers):
            i = 0
            if own is not None and len(ring.buffers) < slots:
                ring.buffers.append(self.new_buffer(own))
                i = len(ring.buffers) - 1
        fence = ring.fences.get(i)
        if fence is not None:
            start = time.perf_counter()
            with self.stages(PLAN_WAIT):
                fence.synchronize()
            self.waited += time.perf_counter() - start
        if own is not None:
            setattr(wrapper, PINNED, ring.buffers[i])
        yield
        fence = self.new_fence()
        if self.device is None:  # after the copy plan() queued from this buffer
            fence.record()
        else:
            fence.record(torch.cuda.current_stream(self.device))
        ring.fences[i], ring.next = fence, i + 1
