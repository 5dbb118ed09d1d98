"""A cell's digest launch replayed from a CUDA graph (DETRUN_DIGEST_GRAPHS=on, the default).

Launching a cell's digests from Python (the lanes zeroed, Triton's launcher, a pinned buffer allocated) cost
the host 84 us per cell on an H100 host, replaying a CUDA graph of the same two kernels 34 us
(scripts/digest_graph_check.py; docs/performance.md). A graph reads the addresses it was captured with, so
one is kept per layout: the tensors' addresses, word sizes and word counts and the cut (each segment's word
count and offset). A layout seen a second time is captured, then replayed whenever a cell's tensors sit at
those addresses again (the caching allocator hands a case's outputs the same blocks repeat after repeat). The
kernel and its arguments are a plain launch's: the same bits.

Each graph owns its lanes and a pinned host buffer; a graph in flight (replayed, its lanes not yet read) is
not replayed again: a layout keeps up to PER_LAYOUT graphs, and the caller launches as before when all are
in flight, the layouts are many, or a capture failed (then no more are tried).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence

import torch

from ..stages import DIGEST_CAPTURE, DIGEST_REPLAY

log = logging.getLogger(__name__)

SIGHTINGS = 2  # a layout is captured when seen this many times (once: launched as before)
PER_LAYOUT = 8  # graphs per layout (cells of one layout in flight at once)
MAX_LAYOUTS = 2048  # captured layouts per process; later ones launch as before

if TYPE_CHECKING:  # Triton loads only where a digest takes its path
    from .digest_triton import Part


def cuda_graph_of(work: Callable[[], None], stream) -> "torch.cuda.CUDAGraph":
    """work() captured in a CUDA graph on a stream of its own (nothing runs; other threads may use the GPU)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            work()
        finally:
            graph.capture_end()
    return graph


class Graph:
    """One captured digest launch, its lanes on the device and their pinned host copy."""

    def __init__(self, graph, lanes: torch.Tensor, host: torch.Tensor, keep: tuple):
        self.graph, self.lanes, self.host, self.keep = graph, lanes, host, keep  # keep: tensors the graph reads
        self.busy = False

    def replay(self) -> None:
        """The digests of the tensors now at the captured addresses, copied to the host behind them."""
        self.graph.replay()
        self.host.copy_(self.lanes, non_blocking=True)
        self.busy = True

    def read(self) -> torch.Tensor:
        """The lanes (a host tensor of their own), once the copy has run; the graph may replay again."""
        lanes = self.host.clone()
        self.busy = False
        return lanes


class DigestGraphs:
    """A task's digest graphs on one device, by layout."""

    def __init__(self, device: torch.device, stages=None,
                 record: Callable[[Callable[[], None], object], object] = cuda_graph_of):
        self.device, self.stages, self.record = device, stages, record
        self.seen: Dict[tuple, int] = {}
        self.layouts: Dict[tuple, List[Graph]] = {}
        self.failed: Optional[str] = None  # why a capture failed here (then: launches as before)
        self._stream: Optional[torch.cuda.Stream] = None

    def launch(self, parts: Sequence[Part]) -> Optional[Graph]:
        """Replay the digests of one or two tensors' segments (parts as digest_triton.triton_lanes takes them),
        capturing first when the layout is due; the graph (read() its lanes after the caller's event), or None:
        the caller launches them as before."""
        if self.failed is not None:
            return None
        key = tuple((flat.data_ptr(), flat.element_size(), flat.numel(), tuple(counts), tuple(starts))
                    for flat, counts, starts in parts)
        graphs = self.layouts.get(key)
        if graphs is None:
            if len(self.layouts) >= MAX_LAYOUTS:
                return None
            seen = self.seen[key] = self.seen.get(key, 0) + 1
            if seen < SIGHTINGS:
                if len(self.seen) > 4 * MAX_LAYOUTS:  # layouts seen once, forgotten now and then
                    self.seen.clear()
                return None
            graphs = self.layouts[key] = []
        graph = next((g for g in graphs if not g.busy), None)
        if graph is None:
            if len(graphs) >= PER_LAYOUT:
                return None
            graph = self._capture(parts)
            if graph is None:
                return None
            graphs.append(graph)
        graph.replay()
        if self.stages is not None:
            self.stages.add(DIGEST_REPLAY, 0.0)  # a count: the seconds are the digest stage's
        return graph

    def _capture(self, parts: Sequence[Part]) -> Optional[Graph]:
        from .digest_triton import lanes_table, triton_lanes

        timer = self.stages(DIGEST_CAPTURE) if self.stages is not None else contextlib.nullcontext()
        with timer:
            lanes = torch.zeros(sum(len(counts) for _, counts, _ in parts), 2, dtype=torch.int64, device=self.device)
            host = torch.empty(lanes.shape, dtype=torch.int64, pin_memory=self.device.type == "cuda")
            table = lanes_table(parts, lanes.device)  # on the device before the capture (a copy is no graph node)

            def work() -> None:
                lanes.zero_()
                triton_lanes(parts, lanes, table)

            try:
                if self._stream is None and self.device.type == "cuda":
                    self._stream = torch.cuda.Stream(self.device)
                graph = self.record(work, self._stream)
            except Exception as exc:  # launches as before: the same bits, the host's time as before
                self.failed = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
                log.warning("detrun: a digest graph could not be captured (%s); digests launch as before", self.failed)
                return None
        return Graph(graph, lanes, host, table)
