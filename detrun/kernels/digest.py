"""Bitwise digests of tensors, computed on the tensor's own device.

Each element's raw bits are mixed with its index (splitmix64) and summed mod 2**64, in two lanes:
order-free integer arithmetic, so the digest does not depend on how the reduction is scheduled, and
changing any one element always changes both lanes. dtype and shape are part of the digest.

Two implementations give the same bits: torch integer ops (any device) and one fused Triton kernel
(CUDA, `digest_triton.py`: 10-40x faster, docs/performance.md), used on a GPU where Triton is
installed; `DETRUN_DIGEST=torch|triton` forces one. Loading the kernel takes ~0.5-2 s per process, so
a task starts it in the background (`prewarm`), digests on the torch path until it is loaded, and waits
for it (`ready`) only before capturing a CUDA graph.
A tensor split into row ranges (one per request) is digested in one pass, with one host copy; single
rows (each request's last query token) can ride along as extra one-row segments of the same launch, and a
cell's output and LSE share that launch (cell_lanes).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import math
import os
import threading
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import torch

from .splitmix import C1, C2, SALTS

if TYPE_CHECKING:
    from .digest_graphs import DigestGraphs

log = logging.getLogger(__name__)

_WORD = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def as_int64(c: int) -> int:
    """An unsigned 64-bit constant as the int64 of the same bits (torch has no uint64 arithmetic)."""
    return c - (1 << 64) if c >= 1 << 63 else c



def srl(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical shift right of int64 words."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (wrapping, logical shifts)."""
    x = x ^ srl(x, 30)
    x = x * as_int64(C1)
    x = x ^ srl(x, 27)
    x = x * as_int64(C2)
    return x ^ srl(x, 31)


def words(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits, one signed integer word per element, flat."""
    return t.detach().contiguous().view(-1).view(_WORD[t.element_size()])


def torch_lanes(flat: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
    """Lanes [segments, 2] int64 of a flat word tensor cut into consecutive segments of these sizes.

    Segment sums are differences of one wrapping prefix sum (exact mod 2**64), so one pass serves all.
    """
    dev, size = flat.device, flat.element_size()
    w = flat.to(torch.int64)
    if size < 8:
        w = w & ((1 << (8 * size)) - 1)
    sizes = torch.tensor(list(counts), dtype=torch.int64, device=dev)
    ends = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), sizes.cumsum(0)])
    idx = torch.arange(flat.numel(), device=dev, dtype=torch.int64)
    if len(counts) > 1:
        idx -= torch.repeat_interleave(ends[:-1], sizes)
    lanes = []
    for salt in SALTS:
        h = mix(w ^ mix(idx + as_int64(salt)))
        if len(counts) == 1:
            lanes.append(h.sum().reshape(1))
        else:
            run = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), h.cumsum(0)])
            lanes.append(run[ends[1:]] - run[ends[:-1]])
    return torch.stack(lanes, dim=1)


@functools.lru_cache(maxsize=None)
def _triton_ok() -> bool:
    return importlib.util.find_spec("triton") is not None


def choice(device_type: str) -> str:
    """torch or triton for tensors on this kind of device (same bits either way)."""
    forced = os.environ.get("DETRUN_DIGEST", "")
    if forced in ("torch", "triton"):
        return forced
    if device_type != "cuda" or not _triton_ok() or _failed is not None:
        return "torch"
    return "torch" if warming() else "triton"  # the kernel is still loading: the torch path, no wait


def implementation(t: torch.Tensor) -> str:
    return choice(t.device.type)


_warming: Optional[threading.Thread] = None
_failed: Optional[str] = None  # why the Triton kernel could not be loaded here (then: the torch path)


def _load_kernel(device: torch.device) -> None:
    global _failed
    try:
        for dtype in (torch.bfloat16, torch.float32):  # outputs and LSEs
            split_lanes(torch.zeros(1, dtype=dtype, device=device), [0, 1], "triton")
        torch.cuda.synchronize(device)
    except Exception as exc:  # no usable Triton on this machine: the torch path gives the same bits
        _failed = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
        log.warning("detrun: the Triton digest kernel did not load (%s); digests take the torch path", _failed)


def prewarm(device: torch.device) -> None:
    """Import Triton and compile (or load from its disk cache) the kernel for 2- and 4-byte words, in a
    background thread, while the task does other set-up. Call ready() before capturing CUDA graphs."""
    global _warming
    if _warming is None and choice(device.type) == "triton":
        _warming = threading.Thread(target=_load_kernel, args=(device,), name="detrun-digest-prewarm", daemon=True)
        _warming.start()


def warming() -> bool:
    """Is prewarm still loading the kernel? (Until it is done, digests take the torch path: same bits.)"""
    return _warming is not None and _warming.is_alive()


def ready() -> None:
    """Wait for prewarm: before capturing a CUDA graph (no other thread may touch the GPU then)."""
    if _warming is not None:
        _warming.join()


@functools.lru_cache(maxsize=4096)
def _cut(row: int, bounds: Tuple[int, ...], rows: Tuple[int, ...]) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """Per segment its word count and word offset, for rows of `row` words: cached, as every repeat of a case
    cuts its outputs the same way."""
    counts = [(b - a) * row for a, b in zip(bounds, bounds[1:])] + [row] * len(rows)
    starts = [a * row for a in bounds[:-1]] + [r * row for r in rows]
    return tuple(counts), tuple(starts)


def _segments(t: torch.Tensor, bounds: Sequence[int],
              rows: Sequence[int]) -> Tuple[torch.Tensor, Sequence[int], Sequence[int]]:
    """(t's flat words, then per segment its word count and word offset): the row ranges, then the single rows."""
    counts, starts = _cut(math.prod(t.shape[1:]), tuple(bounds), tuple(rows))
    return words(t), counts, starts


@functools.lru_cache(maxsize=4096)
def _heads(dtype: str, tail: Tuple[int, ...], bounds: Tuple[int, ...], rows: Tuple[int, ...]) -> Tuple[str, ...]:
    """What each segment's digest hashes before its lanes: dtype and shape (rows x the row's shape)."""
    text = "x".join(map(str, tail))
    sizes = [b - a for a, b in zip(bounds, bounds[1:])] + [1] * len(rows)
    return tuple(f"{dtype}|{n}{'x' if text else ''}{text}|" for n in sizes)


def split_lanes(t: torch.Tensor, bounds: Sequence[int], impl: str = "",
                out: Optional[torch.Tensor] = None, rows: Sequence[int] = ()) -> torch.Tensor:
    """Lanes [len(bounds) - 1 + len(rows), 2] of the row ranges [bounds[i], bounds[i+1]) of t (dim 0), then
    of each single row in `rows` (a one-row segment: the lanes of that row alone), on t's device
    (written into `out`, zeroed int64 of that shape, when given)."""
    flat, counts, starts = _segments(t, bounds, rows)
    if out is None:
        out = torch.zeros(len(counts), 2, dtype=torch.int64, device=t.device)
    if (impl or implementation(t)) == "triton":
        from .digest_triton import triton_lanes

        return triton_lanes([(flat, counts, starts)], out)
    ranges, row = len(bounds) - 1, math.prod(t.shape[1:])
    out[:ranges].copy_(torch_lanes(flat[bounds[0] * row : bounds[-1] * row], counts[:ranges]))
    if rows:
        picked = flat.view(-1, row)[torch.tensor(list(rows), dtype=torch.int64, device=t.device)]
        out[ranges:].copy_(torch_lanes(picked.reshape(-1), counts[ranges:]))
    return out


def _one_launch(tensors: Sequence[torch.Tensor]) -> bool:
    """Do these tensors' digests take one Triton launch?"""
    return len(tensors) <= 2 and implementation(tensors[0]) == "triton"


def _launch(parts) -> torch.Tensor:
    """The lanes of the parts (digest_triton.Part) in one Triton launch, into lanes zeroed here."""
    from .digest_triton import triton_lanes

    lanes = torch.zeros(sum(len(counts) for _, counts, _ in parts), 2, dtype=torch.int64, device=parts[0][0].device)
    return triton_lanes(parts, lanes)


def cell_lanes(tensors: Sequence[torch.Tensor], bounds: Sequence[int], rows: Sequence[int] = ()) -> torch.Tensor:
    """split_lanes of each tensor, stacked [len(tensors) * segments, 2]: on the Triton path a cell's output
    and LSE (one or two tensors) are digested in one launch."""
    if _one_launch(tensors):
        return _launch([_segments(t, bounds, rows) for t in tensors])
    segments = len(bounds) - 1 + len(rows)
    lanes = torch.zeros(len(tensors) * segments, 2, dtype=torch.int64, device=tensors[0].device)
    for i, t in enumerate(tensors):
        split_lanes(t, bounds, out=lanes[i * segments : (i + 1) * segments], rows=rows)
    return lanes


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _hex(head: str, lanes: bytes) -> str:
    return hashlib.blake2b(head.encode() + lanes, digest_size=16).hexdigest()


class PendingDigests:
    """A cell's digests, launched: the lanes are computed and copied to the host behind the work
    already queued on the device; names() waits for them (by then, usually long done)."""

    def __init__(self, tensors: Sequence[torch.Tensor], bounds: Sequence[int], rows: Sequence[int] = (),
                 graphs: Optional["DigestGraphs"] = None):
        """Digests of the row ranges [bounds[i], bounds[i+1]) of each tensor, then of each single row in
        `rows` (each the digest of that row alone, as a tensor of one row); graphs: replay the launch from a
        CUDA graph where one is due (digest_graphs.py)."""
        cut, singles = tuple(bounds), tuple(rows)
        self.heads = [_heads(dtype_name(t), tuple(t.shape[1:]), cut, singles) for t in tensors]
        self.event, self.graph = None, None
        if not tensors:
            self.host = torch.empty(0, 2, dtype=torch.int64)
            return
        device = tensors[0].device
        if graphs is not None and _one_launch(tensors):
            parts = [_segments(t, bounds, rows) for t in tensors]
            self.graph = graphs.launch(parts)
            lanes = self.graph.lanes if self.graph is not None else _launch(parts)
        else:
            lanes = cell_lanes(tensors, bounds, rows)
        if self.graph is not None:  # the graph's pinned buffer: read (and freed) in wait()
            self.host = self.graph.host
        elif device.type == "cuda":  # a pinned copy, so the host need not wait here
            self.host = torch.empty(lanes.shape, dtype=torch.int64, pin_memory=True).copy_(lanes, non_blocking=True)
        else:
            self.host = lanes.cpu()
        if device.type == "cuda":
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(device))

    def wait(self) -> None:
        """Wait until the lanes are on the host (the kernels queued before them have run)."""
        if self.event is not None:
            self.event.synchronize()
            self.event = None
        if self.graph is not None:
            self.host, self.graph = self.graph.read(), None

    def names(self) -> List[List[str]]:
        """Per tensor, the 128-bit hex digest of each row range."""
        self.wait()
        host, at, out = self.host.numpy(), 0, []
        for heads in self.heads:
            out.append([_hex(head, host[at + j].tobytes()) for j, head in enumerate(heads)])
            at += len(heads)
        return out


def split_digests(tensors: Sequence[torch.Tensor], bounds: Sequence[int], rows: Sequence[int] = ()) -> List[List[str]]:
    """Per tensor, the 128-bit hex digests of its row ranges (then of the single rows `rows`); 16 bytes per
    digest leave the device, in one copy."""
    return PendingDigests(tensors, bounds, rows).names()


def tensor_digest(t: torch.Tensor) -> str:
    """128-bit hex digest of (dtype, shape, raw bytes); only 16 bytes leave the device."""
    if t.dim() == 0:
        return _hex(f"{dtype_name(t)}||", split_lanes(t.reshape(1), [0, 1]).cpu().numpy().tobytes())
    return split_digests([t], [0, t.shape[0]])[0][0]


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw bytes (host copy), kept only for the first tensor seen with a digest."""
    return words(t).cpu().numpy().tobytes()
