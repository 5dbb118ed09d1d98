"""The kernel audit's session recorded by CUPTI's activity API itself (NVIDIA's cupti-python), kernel records only,
instead of torch.profiler (DETRUN_KERNEL_TRACER: auto where cupti-python loads, or cupti). It plugs into
ProfileSession (kernel_session.py): the same markers, the same split per cell; a kernel's name is demangled as
kineto shows it (libstdc++'s __cxa_demangle). Copies and fills are not recorded (the audit reads FlashInfer's
kernels only). Why: docs/performance.md, "CUPTI's kernel records on an H100".
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, List, Optional, Tuple

from .kernel_session import Event

BUFFER_BYTES = 8 << 20  # one activity buffer CUPTI fills before it hands it back (and asks for another)


class CuptiKernels:
    """start() and stop() as torch's profiler; between them, every kernel's (start ns, stream, mangled name)."""

    def __init__(self, cupti: Optional[Any] = None):
        self.cupti: Any = cupti if cupti is not None else cupti_python()
        self.kind = int(self.cupti.ActivityKind.CONCURRENT_KERNEL)
        self.records: List[Tuple[int, int, str]] = []

    def _requested(self) -> Tuple[int, int]:
        return BUFFER_BYTES, 0  # 0: as many records as the buffer holds

    def _completed(self, activities) -> None:
        # a record lives only as long as its buffer: keep plain values (CUPTI may call this from its own thread)
        self.records.extend((a.start, a.stream_id, a.name) for a in activities if int(a.kind) == self.kind)

    def start(self) -> None:
        self.cupti.activity_register_callbacks(self._requested, self._completed)
        self.cupti.activity_enable(self.kind)

    def stop(self) -> None:
        """Hand back every buffer (forced: the partly filled ones too), then stop recording."""
        try:
            self.cupti.activity_flush_all(1)
        finally:
            self.cupti.activity_disable(self.kind)


def cupti_python() -> Any:
    """cupti-python's module; an ImportError (or OSError) where it, or what it loads, is missing or for another CUDA."""
    from cupti import cupti

    return cupti


def cupti_events(tracer: CuptiKernels) -> List[Event]:
    """The session's kernels as ProfileSession reads them: (start ns, stream, name as kineto shows it)."""
    return [(start, stream, demangle(name)) for start, stream, name in tracer.records]


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """A mangled C++ name demangled by libstdc++ (as kineto does); a name that is not one, unchanged."""
    status = ctypes.c_int()
    out = _cxa_demangle()(name.encode(), None, None, ctypes.byref(status))
    if status.value or not out:
        return name
    try:
        return ctypes.string_at(out).decode(errors="replace")
    finally:
        _free()(ctypes.c_void_p(out))


@functools.lru_cache(maxsize=1)
def _cxa_demangle():
    fn = ctypes.CDLL("libstdc++.so.6").__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    return fn


@functools.lru_cache(maxsize=1)
def _free():
    return ctypes.CDLL("libc.so.6").free
