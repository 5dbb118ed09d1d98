"""A task's first cases built on a thread while its own thread is held elsewhere (the kernel profile session's
start: CUPTI's set-up, 3.2-4.9 s on the GPU machines, the GIL released), so some of their copies to the device and
scatters leave the first repeat's path: 11-12 of 125 cases on an H100, whose copies wait while CUPTI sets up
(docs/performance.md, "The first repeat's inputs, and the first cases built beside CUPTI's set-up").
The thread is joined before any cell runs: no CUDA graph capture of the task's thread overlaps its device work.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterable, Tuple

import torch


def build_while(foreground: Callable[[], None], cases: Iterable[str], build: Callable[[str], None],
                stream=None) -> Tuple[float, int]:
    """Run foreground() here while a thread calls build(case) for the cases in order (on `stream`, the cells'
    stream) until foreground has returned and the case in progress is done. A build that raises stops the thread
    (the cell that needs the case builds it again and meets the error there). (the thread's seconds, cases
    built)."""
    stop, seconds, built = threading.Event(), [0.0], [0]

    def run() -> None:
        start = time.perf_counter()
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                for case in cases:
                    if stop.is_set():
                        break
                    build(case)
                    built[0] += 1
        except Exception:  # noqa: BLE001  (the cell meets it again, as its own error)
            pass
        finally:
            seconds[0] = time.perf_counter() - start

    thread = threading.Thread(target=run, name="detrun-inputs", daemon=True)
    thread.start()
    try:
        foreground()
    finally:
        stop.set()
        thread.join()
    return seconds[0], built[0]

