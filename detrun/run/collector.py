"""Python's garbage collector during a task's cells: its pauses timed, the long-lived heap frozen.

A full collection scans every tracked object of the process (torch, FlashInfer, Ray, the rows written so
far): 338 ms in the sweep's profiling process on the H200, during which no kernel is queued. The objects
alive when the cells start, and each finished case's rows, live until the task returns, so they are frozen
(`gc.freeze`: never scanned again); collections then scan only what the current case made. Unfrozen when the
task's cells are done.
"""

from __future__ import annotations

import gc
import time
from typing import Optional

from ..stages import GC_PAUSE, Stages


class Collector:
    """`with Collector(stages):` times every collection as the stage GC_PAUSE (it runs inside whatever stage
    it interrupts) and, with freeze, freezes the heap at entry and at each settle()."""

    def __init__(self, stages: Stages, freeze: bool = True):
        self.stages, self.freeze = stages, freeze
        self.started: Optional[float] = None
        self.active = self.froze = False

    def _pause(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        elif self.started is not None:
            self.stages.add(GC_PAUSE, time.perf_counter() - self.started)
            self.started = None

    def settle(self) -> None:
        """What is alive now lives until the task returns: never scan it again (with freeze)."""
        if self.active and self.freeze:
            gc.freeze()
            self.froze = True

    def __enter__(self) -> "Collector":
        gc.callbacks.append(self._pause)
        self.active = True
        self.settle()
        return self

    def __exit__(self, *exc) -> None:
        self.active = False
        gc.callbacks.remove(self._pause)
        if self.froze:
            gc.unfreeze()  # a reused worker process collects them again
            self.froze = False
