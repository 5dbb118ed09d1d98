"""One torch.profiler session over a task's profiled cells (its first repeats), for the kernel audit.

Each profiled cell's own run is bracketed by a marker kernel on the cells' stream (torch.cuda._sleep's
spin kernel, which no cell launches); when the session closes, the device events on the marker's stream
between a pair of markers are that cell's kernels. No cell waits for the device or runs a second time to be
profiled (the way before: a sync that drained the cells in flight, then one more run or capture per plan,
17.5-19.4 ms a plan on the H200, docs/performance.md). The lists a cell's rows hold are filled in place at
close, which the worker calls before its rows leave the task.
"""

from __future__ import annotations

import bisect
import collections
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

MARKER = "spin_kernel"  # at::cuda::(anonymous namespace)::spin_kernel, launched by torch.cuda._sleep
NAME_CHARS = 300  # a kernel name as the rows keep it: its first characters (templated GEMM names run longer)

Event = Tuple[int, int, str]  # a device event of the session: (start ns, stream, name)


class ProfileError(RuntimeError):
    """The session's markers do not pair up with its cells."""


def split_by_markers(events: Sequence[Event], cells: int) -> List[List[str]]:
    """Per marker pair, in order: the sorted names (cut to NAME_CHARS) of the events on the pair's stream
    that started between its two markers. Events on other streams (digests of earlier cells, a graph's
    warm-up on its side stream) are not a cell's."""
    marks = sorted(e for e in events if MARKER in e[2])
    if len(marks) != 2 * cells:
        raise ProfileError(f"kernel profile: {len(marks)} markers for {cells} profiled cells (2 each)")
    by_stream: Dict[int, List[Tuple[int, str]]] = collections.defaultdict(list)
    for start, stream, name in events:
        if MARKER not in name:
            by_stream[stream].append((start, name))
    for rows in by_stream.values():
        rows.sort()
    groups = []
    for (begin, stream, _), (end, stream_end, _) in zip(marks[::2], marks[1::2]):
        if stream_end != stream:
            raise ProfileError(f"kernel profile: a cell's markers ran on two streams ({stream}, {stream_end})")
        rows = by_stream.get(stream, [])
        inside = rows[bisect.bisect_right(rows, (begin, "\uffff")):bisect.bisect_left(rows, (end, ""))]
        groups.append(sorted({name[:NAME_CHARS] for _, name in inside}))
    if groups and not any(groups):  # every cell runs a kernel: the events are not where the markers say
        raise ProfileError(f"kernel profile: no device event on the markers' stream between any of {cells} pairs")
    return groups


def _device_events(prof) -> List[Event]:
    """The session's device events (kernels, copies, fills) as (start ns, stream, name): kineto's
    resource id of a device event is its stream."""
    return [(e.start_ns(), e.device_resource_id(), e.name()) for e in prof.profiler.kineto_results.events()
            if str(e.device_type()).endswith("CUDA")]


def _marker() -> None:
    torch.cuda._sleep(0)


class ProfileSession:
    """The session, opened at construction; cell() brackets one profiled cell's run and gives the list its
    kernel names go into at close()."""

    def __init__(self, device: torch.device, profiler: Optional[Callable[[], Any]] = None,
                 marker: Callable[[], None] = _marker, events: Callable[[Any], List[Event]] = _device_events):
        from torch.profiler import ProfilerActivity, profile

        self.device, self.marker, self.events = device, marker, events
        self.prof = (profiler or (lambda: profile(activities=[ProfilerActivity.CUDA])))()
        self.prof.start()
        self.cells: List[List[str]] = []
        self.broken = ""  # why a cell's pair of markers is incomplete (its lists are then left empty)

    def cell(self) -> "_Cell":
        return _Cell(self)

    def close(self) -> None:
        """Wait for the device, stop the profiler and fill every cell's list; a ProfileError leaves them empty."""
        with warnings.catch_warnings():  # torch's note that a session's events are cleared at its end
            warnings.filterwarnings("ignore", message=".*Profiler clears events")
            try:
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
            finally:
                self.prof.stop()
            if self.broken:
                raise ProfileError(f"kernel profile: {self.broken}")
            events = self.events(self.prof)
        for names, found in zip(self.cells, split_by_markers(events, len(self.cells))):
            names[:] = found


class _Cell:
    def __init__(self, session: ProfileSession):
        self.session = session
        self.names: List[str] = []

    def __enter__(self) -> List[str]:
        self.session.marker()
        return self.names

    def __exit__(self, *exc) -> None:
        try:
            self.session.marker()
        except Exception as err:  # the context is gone: no pair, the session's lists stay empty
            self.session.broken = self.session.broken or f"no closing marker: {err}"
            return
        self.session.cells.append(self.names)

