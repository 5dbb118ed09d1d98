"""A shard task's cell watchdog: a cell that runs longer than isolation.cell_timeout_s ends its process
(faulthandler prints every thread's stack first), so the driver isolates the shard's cells.

faulthandler's watchdog runs without the GIL (a hung C call cannot stop it), but each arming cancels its
thread, joins it and starts a new one: 0.1-0.2 ms of the host's time per call on a 2-core machine, paid per
cell where a steady cell's kernel takes 1.5 ms. So it is armed again only once REARM_S has passed since it
was last armed, with REARM_S more on its deadline: a cell started at t has then been armed at some a with
t - REARM_S < a <= t, and its process ends between t + timeout and t + timeout + REARM_S, never before.
"""

from __future__ import annotations

import faulthandler
import time
from typing import Callable, Optional

REARM_S = 1.0  # seconds between armings; a hung cell ends its process at most this late


class CellWatchdog:
    """`before_cell()` before each cell, `stop()` after the last. clock: time.monotonic (tests pass their own)."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self.timeout_s, self.clock = timeout_s, clock
        self.armed_at: Optional[float] = None

    def before_cell(self) -> None:
        now = self.clock()
        if self.armed_at is None or now - self.armed_at >= REARM_S:
            faulthandler.dump_traceback_later(self.timeout_s + REARM_S, exit=True)
            self.armed_at = now

    def stop(self) -> None:
        if self.armed_at is not None:
            faulthandler.cancel_dump_traceback_later()
            self.armed_at = None
