"""digest.py's lanes as one fused Triton kernel: one read of the tensor, every segment in one launch.

Same arithmetic as `digest.torch_lanes` in uint64 (wrapping multiply, logical shifts; each program's
sums mod 2**64 added per segment by an integer index_add_, which commutes), so both give the same
bits: tests check it in Triton's interpreter on the CPU, bench/digest_bench.py on the GPU.
Imported only where a digest takes this path.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence, Tuple

import torch
import triton
import triton.language as tl

from .splitmix import C1, C2, SALTS

# The torch path's constants (splitmix.py), as the compile-time globals Triton accepts.
_C1, _C2 = tl.constexpr(C1), tl.constexpr(C2)
_SALT0, _SALT1 = tl.constexpr(SALTS[0]), tl.constexpr(SALTS[1])
BLOCK = 1024
UNROLL = 4  # blocks per program: one program reads BLOCK * UNROLL words of one segment


@triton.jit
def _mix(x):
    x = x ^ (x >> 30)
    x = x * _C1
    x = x ^ (x >> 27)
    x = x * _C2
    return x ^ (x >> 31)


# Loads are gathered through runtime offsets, so pointer alignment buys nothing: not specialising on it
# keeps one compiled kernel per word size (the sliced table and row ranges vary in alignment).
@triton.jit(do_not_specialize_on_alignment=["words_ptr", "seg_ptr", "chunk_ptr", "starts_ptr", "counts_ptr", "out_ptr"])
def _lanes_kernel(words_ptr, seg_ptr, chunk_ptr, starts_ptr, counts_ptr, out_ptr,
                  WORD_BITS: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    seg = tl.load(seg_ptr + pid)
    start = tl.load(starts_ptr + seg)
    count = tl.load(counts_ptr + seg)
    first = tl.load(chunk_ptr + pid).to(tl.int64) * (BLOCK * UNROLL)
    acc0 = tl.zeros([BLOCK], dtype=tl.uint64)
    acc1 = tl.zeros([BLOCK], dtype=tl.uint64)
    for j in tl.static_range(UNROLL):
        idx = first + j * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
        mask = idx < count
        w = tl.load(words_ptr + start + idx, mask=mask, other=0)
        if WORD_BITS == 8:
            u = w.to(tl.uint8, bitcast=True).to(tl.uint64)
        elif WORD_BITS == 16:
            u = w.to(tl.uint16, bitcast=True).to(tl.uint64)
        elif WORD_BITS == 32:
            u = w.to(tl.uint32, bitcast=True).to(tl.uint64)
        else:
            u = w.to(tl.uint64, bitcast=True)
        i = idx.to(tl.uint64)
        acc0 += tl.where(mask, _mix(u ^ _mix(i + _SALT0)), 0)
        acc1 += tl.where(mask, _mix(u ^ _mix(i + _SALT1)), 0)
    tl.store(out_ptr + 2 * pid, tl.sum(acc0, axis=0).to(tl.int64, bitcast=True))
    tl.store(out_ptr + 2 * pid + 1, tl.sum(acc1, axis=0).to(tl.int64, bitcast=True))


@functools.lru_cache(maxsize=256)
def _table(counts: Tuple[int, ...], starts: Optional[Tuple[int, ...]],
           device: str) -> Tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(programs, then on the device: program -> segment, program -> chunk in it, segment starts, counts).
    Segments are consecutive from 0 unless their starts are given.

    Cached: every repeat of a case cuts its outputs the same way."""
    chunks = torch.tensor([-(-c // (BLOCK * UNROLL)) for c in counts], dtype=torch.int64)
    n, k = int(chunks.sum()), len(counts)
    seg = torch.repeat_interleave(torch.arange(k), chunks)
    chunk = torch.arange(n) - torch.repeat_interleave(chunks.cumsum(0) - chunks, chunks)
    sizes = torch.tensor(counts, dtype=torch.int64)
    first = sizes.cumsum(0) - sizes if starts is None else torch.tensor(starts, dtype=torch.int64)
    table = torch.cat([seg, chunk, first, sizes]).to(device)  # one copy to the device
    return (n, *table.split([n, n, k, k]))


def triton_lanes(flat: torch.Tensor, counts: Sequence[int], lanes: torch.Tensor,
                 starts: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Adds to lanes [segments, 2] int64 (zeroed) those of a flat word tensor cut into segments: consecutive
    from its start, or of these sizes at these word offsets (any order, overlapping)."""
    n, seg, chunk, first, sizes = _table(tuple(counts), None if starts is None else tuple(starts), str(flat.device))
    if n == 0:
        return lanes
    partial = torch.empty(n, 2, dtype=torch.int64, device=flat.device)
    _lanes_kernel[(n,)](flat, seg, chunk, first, sizes, partial,
                        WORD_BITS=8 * flat.element_size(), BLOCK=BLOCK, UNROLL=UNROLL)
    return lanes.index_add_(0, seg, partial)
