"""Hold Ctrl-C and SIGTERM back for a few lines that must not stop halfway (an object store upload)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Run the block with SIGINT and SIGTERM held; a signal that came meanwhile is handled right after
    it, by the handler that was installed before. Python runs handlers only in the main thread, so
    elsewhere nothing needs holding."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: List[Tuple[int, object]] = []
    previous: Dict[int, Any] = {}
    for held_signal in HELD:
        if signal.getsignal(held_signal) is not None:  # None: installed outside Python, which cannot restore it
            previous[held_signal] = signal.signal(held_signal, lambda s, frame: caught.append((s, frame)))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        raised: Optional[BaseException] = None
        for signum, frame in caught:  # each one handled; the first exception a handler raised goes on
            try:
                _handle(previous[signum], signum, frame)
            except BaseException as exc:
                raised = raised or exc
        if raised is not None:
            raise raised


def _handle(handler, signum: int, frame) -> None:
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)
