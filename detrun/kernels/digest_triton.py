"""digest.py's lanes as one fused Triton kernel: one read of each tensor, every segment of a cell's output
and LSE in one launch.

Same arithmetic as `digest.torch_lanes` in uint64 (wrapping multiply, logical shifts; each program's
sums mod 2**64 added to its segment's lanes by an integer atomic add, which commutes), so both give the same
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


@triton.jit
def _chunk_sums(words_ptr, start, count, first, WORD_BITS: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """Both lanes' sums (mod 2**64) over the words [first, first + BLOCK * UNROLL) of a segment."""
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
    return tl.sum(acc0, axis=0), tl.sum(acc1, axis=0)


# Loads are gathered through runtime offsets, so pointer alignment buys nothing: not specialising on it
# keeps one compiled kernel per pair of word sizes (the sliced table and row ranges vary in alignment).
@triton.jit(do_not_specialize=["a_programs"],
            do_not_specialize_on_alignment=["a_ptr", "b_ptr", "seg_ptr", "chunk_ptr", "starts_ptr", "counts_ptr",
                                            "out_ptr"])
def _lanes_kernel(a_ptr, b_ptr, seg_ptr, chunk_ptr, starts_ptr, counts_ptr, out_ptr, a_programs,
                  A_BITS: tl.constexpr, B_BITS: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """Program pid digests one chunk of one segment: of tensor a for pid < a_programs, else of tensor b; its
    sums are added atomically to the segment's lanes (integer adds commute: the bits do not depend on the
    order the programs finish in)."""
    pid = tl.program_id(0)
    seg = tl.load(seg_ptr + pid)
    start = tl.load(starts_ptr + seg)
    count = tl.load(counts_ptr + seg)
    first = tl.load(chunk_ptr + pid).to(tl.int64) * (BLOCK * UNROLL)
    if pid < a_programs:
        s0, s1 = _chunk_sums(a_ptr, start, count, first, A_BITS, BLOCK, UNROLL)
    else:
        s0, s1 = _chunk_sums(b_ptr, start, count, first, B_BITS, BLOCK, UNROLL)
    tl.atomic_add(out_ptr + 2 * seg, s0.to(tl.int64, bitcast=True))
    tl.atomic_add(out_ptr + 2 * seg + 1, s1.to(tl.int64, bitcast=True))


@functools.lru_cache(maxsize=256)
def _table(parts: Tuple[Tuple[Tuple[int, ...], Tuple[int, ...]], ...], device: str) -> Tuple[Tuple[int, ...], tuple]:
    """(programs per part, then on the device: program -> segment, program -> chunk in it, segment starts,
    counts), for parts of (segment counts, segment starts) numbered on from one part to the next.

    Cached: every repeat of a case cuts its outputs the same way."""
    counts = [c for part, _ in parts for c in part]
    starts = [s for _, part in parts for s in part]
    per = [[-(-c // (BLOCK * UNROLL)) for c in part] for part, _ in parts]
    chunks = torch.tensor([n for part in per for n in part], dtype=torch.int64)
    n, k = int(chunks.sum()), len(counts)
    seg = torch.repeat_interleave(torch.arange(k), chunks)
    chunk = torch.arange(n) - torch.repeat_interleave(chunks.cumsum(0) - chunks, chunks)
    table = torch.cat([seg, chunk, torch.tensor(starts, dtype=torch.int64), torch.tensor(counts, dtype=torch.int64)])
    return tuple(sum(part) for part in per), table.to(device).split([n, n, k, k])  # one copy to the device


Part = Tuple[torch.Tensor, Sequence[int], Sequence[int]]  # flat words, segment word counts, segment word offsets


def lanes_table(parts: Sequence[Part], device) -> Tuple[Tuple[int, ...], tuple]:
    """_table of these parts (the programs per part and the program table on the device)."""
    return _table(tuple((tuple(counts), tuple(starts)) for _, counts, starts in parts), str(device))


def triton_lanes(parts: Sequence[Part], lanes: torch.Tensor, table: Optional[tuple] = None) -> torch.Tensor:
    """Adds to lanes [segments, 2] int64 (zeroed) the lanes of one or two flat word tensors' segments, each
    part (flat words, segment word counts, segment word offsets: any order, overlapping), in one launch;
    the parts' segments are numbered on in order. table: lanes_table(parts), when the caller holds it."""
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"one launch digests one or two tensors, not {len(parts)}")
    programs, (seg, chunk, first, sizes) = table if table is not None else lanes_table(parts, lanes.device)
    if sum(programs) == 0:
        return lanes
    a, b = parts[0][0], parts[-1][0]
    _lanes_kernel[(sum(programs),)](a, b, seg, chunk, first, sizes, lanes, programs[0],
                                    A_BITS=8 * a.element_size(), B_BITS=8 * b.element_size(),
                                    BLOCK=BLOCK, UNROLL=UNROLL)
    return lanes
