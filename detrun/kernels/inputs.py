"""Seeded inputs: ragged q/k/v per request, scattered into a paged KV cache by a seeded page permutation.

Values depend only on (spec.seed, request or prefix name), never on the batch or the device. With
`draws: cpu` (the default) they are drawn on the CPU (torch's CPU generator, one per value set), rounded to
the dtype there and moved, so the same request has the same bits in every case and on every GPU; a task
draws each once (`Draws`), a case's sets side by side on CPU threads (each set has its own generator: the
same bits in any order). With `draws: counter` each value is made on the task's device from a counter hash
(`counter_values`: integer arithmetic, exact in fp32), the same bits on any device with no CPU work. The
stale values in every other cache slot come from such a hash too.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ContextManager, Dict, Iterable, List, Optional, Tuple

import torch

from ..spec.model import JobSpec
from ..stages import DRAW_MOVE, DRAW_WAIT
from .digest import as_int64, mix, srl
from .pinned_ring import Block, PinnedRing, block_bytes

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def stable_seed(*parts: object) -> int:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


def _randn(seed: int, *shape: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def stale(seed: int, shape: Tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """Seeded garbage in [-4, 4) drawn on the device: 16 hashed bits per element, exact in any dtype's range."""
    idx = torch.arange(math.prod(shape), device=device, dtype=torch.int64)
    bits = mix(idx ^ seed) & 0xFFFF
    return ((bits - 0x8000).to(torch.float32) / 8192).to(dtype).reshape(shape)


_GOLDEN = as_int64(0x9E3779B97F4A7C15)  # splitmix64's increment: element i's state is seed + i * _GOLDEN


def counter_values(seed: int, shape: Tuple[int, ...], device) -> torch.Tensor:
    """Seeded values of mean 0 and standard deviation ~1 (fp32) made on the device: element i is the sum of
    three 16-bit fields of splitmix64(seed + i * golden), centred and scaled by 2**-16 (Irwin-Hall of three,
    within +-3). Integer arithmetic and an exact conversion: the same bits on any device."""
    state = torch.arange(math.prod(shape), device=device, dtype=torch.int64) * _GOLDEN + seed
    h = mix(state)
    total = (h & 0xFFFF) + (srl(h, 16) & 0xFFFF) + (srl(h, 32) & 0xFFFF)
    return ((2 * total - 3 * 0xFFFF).to(torch.float32) * 2.0**-16).reshape(shape)


DrawKey = Tuple[str, str, int, int]  # (kind, request or prefix key, rows, heads): one seeded value set


def draw_threads() -> int:
    """CPU threads a task draws value sets on (each set is one serial generator; sets run side by side)."""
    return max(1, min(8, os.cpu_count() or 1))


def on_threads(spec: JobSpec, threads: int) -> bool:
    """Whether a task's value sets are drawn on CPU threads (and so may go through a pinned ring): CPU draws and more
    than one thread (counter draws are made on the device)."""
    return spec.draws == "cpu" and threads > 1


class Draws:
    """One task's draws of request and prefix values, on its device in the spec's dtype (each drawn once).

    prefetch() starts value sets on CPU threads (CPU work only: a CUDA graph capture on the task's thread is
    never disturbed); a call takes the set from its thread, or draws it there and then, and moves it to the
    device on the caller's thread (stages: the task's, for DRAW_WAIT and DRAW_MOVE)."""

    def __init__(self, spec: JobSpec, device, threads: int = 1,
                 stages: Optional[Callable[[str], ContextManager]] = None, ring: Optional[PinnedRing] = None) -> None:
        """ring: pinned host memory the threads draw into, so a set's move is a queued copy (pinned_ring.py)."""
        self.spec, self.device = spec, device
        self.stages = stages or (lambda name: contextlib.nullcontext())
        self.cache: Dict[Any, torch.Tensor] = {}
        on_cpu = on_threads(spec, threads)
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="detrun-draws") if on_cpu else None
        self.ring = ring if on_cpu else None
        self.ahead: Dict[Tuple[str, str], Tuple[Future, Optional[Block]]] = {}

    def _host(self, kind: str, name: str, n: int, heads: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """A set drawn on the CPU in the spec's dtype (into out, a ring's view, when given: the same cast)."""
        values = _randn(stable_seed(self.spec.seed, kind, name), n, heads, self.spec.head_dim)
        return values.to(DTYPES[self.spec.dtype]) if out is None else out.copy_(values)

    def prefetch(self, keys: Iterable[DrawKey]) -> None:
        """Start drawing these value sets on the CPU threads (those not drawn or started yet)."""
        if self.pool is None:
            return
        for kind, name, n, heads in keys:
            if (kind, name) not in self.cache and (kind, name) not in self.ahead:
                room = self.ring.reserve((n, heads, self.spec.head_dim), DTYPES[self.spec.dtype]) if self.ring else None
                block, out = room if room is not None else (None, None)
                self.ahead[(kind, name)] = (self.pool.submit(self._host, kind, name, n, heads, out), block)

    def __call__(self, kind: str, name: str, n: int, heads: int) -> torch.Tensor:
        key = (kind, name)
        if key not in self.cache:
            if self.spec.draws == "counter":
                self.cache[key] = self._counter(kind, name, n, heads)
            else:
                with self.stages(DRAW_WAIT):
                    host, block = self._taken(kind, name, n, heads)
                with self.stages(DRAW_MOVE):
                    # a ring's block is reused once moved: a copy even where the device is the host's
                    self.cache[key] = host.to(self.device, non_blocking=block is not None, copy=block is not None)
                    if block is not None and self.ring is not None:
                        self.ring.fence(block)
        return self.cache[key]

    def _taken(self, kind: str, name: str, n: int, heads: int) -> Tuple[torch.Tensor, Optional[Block]]:
        """The CPU draw of a set and its ring block: from its thread when started there, else drawn now."""
        started = self.ahead.pop((kind, name), None)
        if started is None:
            return self._host(kind, name, n, heads), None
        return started[0].result(), started[1]

    def _counter(self, kind: str, name: str, n: int, heads: int) -> torch.Tensor:
        """A set made on the device (draws: counter), in the spec's dtype."""
        seed, shape = stable_seed(self.spec.seed, kind, name), (n, heads, self.spec.head_dim)
        return counter_values(seed, shape, self.device).to(DTYPES[self.spec.dtype])

    def move(self, host: torch.Tensor) -> torch.Tensor:
        """A small host tensor (a case's slot indices) on the device. With a ring, through pinned memory: a copy queued
        behind the stream's work (a copy from pageable memory holds the host until the stream's queued set copies and
        kernels are done)."""
        if self.ring is None or torch.device(self.device).type != "cuda":
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)

    def close(self) -> None:
        """Stop the threads (sets started and not taken are dropped)."""
        if self.pool is not None:
            for started, _ in self.ahead.values():
                started.cancel()
            self.pool.shutdown(wait=True)
            self.pool, self.ahead = None, {}


def draw_keys(spec: JobSpec, case: str) -> List[DrawKey]:
    """The value sets build_batch draws for a case, in its order: each new prefix's k and v, then each
    request's q, k and v."""
    keys: List[DrawKey] = []
    seen = set()
    for name in spec.members(case):
        req, key = spec.request(name), spec.prefix_key(name)
        if req.prefix_len and key not in seen:
            seen.add(key)
            keys += [("prefix-k", key, req.prefix_len, spec.heads.kv), ("prefix-v", key, req.prefix_len, spec.heads.kv)]
    for name in spec.members(case):
        n = spec.request(name).qo_len
        keys += [("q", name, n, spec.heads.qo), ("k", name, n, spec.heads.kv), ("v", name, n, spec.heads.kv)]
    return keys


def ring_bytes(spec: JobSpec, cases: Iterable[str]) -> int:
    """The bytes the value sets these cases draw take in a pinned ring, each set once."""
    keys = {key[:2]: key for case in cases for key in draw_keys(spec, case)}
    return sum(block_bytes(n * heads * spec.head_dim, DTYPES[spec.dtype]) for _, _, n, heads in keys.values())


@dataclass
class PageTable:
    """FlashInfer's paged-KV index triple (int32, CPU)."""

    indptr: torch.Tensor
    indices: torch.Tensor
    last_page_len: torch.Tensor
    _on: Dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    def indices_on(self, device) -> torch.Tensor:
        """The indices copied to a device (once)."""
        key = str(device)
        if key not in self._on:
            self._on[key] = self.indices.to(device)
        return self._on[key]

    @classmethod
    def build(cls, pages: List[List[int]], lens: List[int], page_size: int) -> "PageTable":
        indptr = [0]
        for p in pages:
            indptr.append(indptr[-1] + len(p))
        last = [(n - 1) % page_size + 1 if n else 0 for n in lens]
        flat = [i for p in pages for i in p]
        as_i32 = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
        return cls(as_i32(indptr), as_i32(flat), as_i32(last))

    def token_slots(self, lens: List[int], page_size: int) -> "PageTable":
        """This table over pages of one token: each request's first lens[i] slots (page * page_size + offset)."""
        pages = [self.indices[int(a) : int(b)].tolist() for a, b in zip(self.indptr[:-1], self.indptr[1:])]
        slots = [[p[t // page_size] * page_size + t % page_size for t in range(n)] for p, n in zip(pages, lens)]
        table = PageTable.build(slots, lens, 1)
        table.last_page_len.fill_(1)
        return table


@dataclass
class Batch:
    """One batch composition (a case) with everything both wrappers need."""

    case: str
    requests: List[str]
    qo_lens: List[int]
    prefix_lens: List[int]
    qo_indptr: torch.Tensor  # int32 CPU, over new tokens
    q: torch.Tensor  # [tokens, Hq, D]
    k: torch.Tensor  # [tokens, Hkv, D] new tokens only (the ragged wrapper's input)
    v: torch.Tensor
    k_cache: torch.Tensor  # [pages, page_size, Hkv, D] (NHD) holding prefix and new tokens
    v_cache: torch.Tensor
    full: PageTable  # prefix + new tokens, per request
    prefix: PageTable  # prefix only (ragged + paged-prefix path)
    page_size: int
    _tokens: Optional["Batch"] = field(default=None, repr=False, compare=False)

    @property
    def kv_lens(self) -> List[int]:
        return [q + p for q, p in zip(self.qo_lens, self.prefix_lens)]

    @property
    def has_prefix(self) -> bool:
        return any(self.prefix_lens)

    def token_pages(self) -> "Batch":
        """The same batch over pages of one token (SGLang's view: its FlashInfer plans take page size 1 over token
        slots, whatever its page_size): each request's slots page * page_size + offset, last_page_len 1 (SGLang's
        kv_last_page_len buffer holds ones), the caches viewed [slots, 1, Hkv, D]. Made once per batch."""
        if self.page_size == 1:
            return self
        if self._tokens is None:
            ps = self.page_size
            shape = (-1, 1, *self.k_cache.shape[2:])
            self._tokens = replace(self, k_cache=self.k_cache.view(shape), v_cache=self.v_cache.view(shape),
                                   full=self.full.token_slots(self.kv_lens, ps),
                                   prefix=self.prefix.token_slots(self.prefix_lens, ps), page_size=1)
        return self._tokens

    def span(self, i: int) -> slice:
        return slice(int(self.qo_indptr[i]), int(self.qo_indptr[i + 1]))

    @property
    def last_rows(self) -> torch.Tensor:
        """Each request's last query row in q (int64, CPU): the token a decode step computes."""
        return self.qo_indptr[1:].long() - 1


def build_batch(spec: JobSpec, case: str, device: torch.device | str = "cpu", draws: Optional[Draws] = None) -> Batch:
    names = spec.members(case)
    ps, hkv, hq, d = spec.page_size, spec.heads.kv, spec.heads.qo, spec.head_dim
    dtype = DTYPES[spec.dtype]

    # Logical layout: a prefix owns its pages (shared when its key repeats); new tokens follow.
    n_pages = 0
    prefix_pages: Dict[str, List[int]] = {}
    full_pages, pre_pages, slots_pre = [], [], []
    for name in names:
        req = spec.request(name)
        key = spec.prefix_key(name)
        pages: List[int] = []
        if req.prefix_len:
            if key not in prefix_pages:
                count = -(-req.prefix_len // ps)
                prefix_pages[key] = list(range(n_pages, n_pages + count))
                slots_pre.append((key, req.prefix_len, prefix_pages[key]))
                n_pages += count
            pages = list(prefix_pages[key])
        pre_pages.append(list(pages))
        # the new tokens go on from position prefix_len: into the prefix's last page while it has room, then into a
        # new page at each page start past the request's pages
        last = (req.prefix_len + req.qo_len - 1) // ps if req.qo_len else -1
        added = max(0, last - len(pages) + 1)
        pages += range(n_pages, n_pages + added)
        n_pages += added
        full_pages.append(pages)

    spare = max(2, n_pages // 4)
    pool = n_pages + spare
    perm = torch.randperm(pool, generator=torch.Generator().manual_seed(stable_seed(spec.seed, "perm", case)))
    phys = perm[:n_pages]
    draws = draws or Draws(spec, device)
    draws.prefetch(draw_keys(spec, case))  # side by side, when the draws have threads
    # Stale, seeded garbage in every slot: a kernel reading outside its pages sees it.
    k_cache = stale(stable_seed(spec.seed, "stale-k", case), (pool, ps, hkv, d), dtype, device)
    v_cache = stale(stable_seed(spec.seed, "stale-v", case), (pool, ps, hkv, d), dtype, device)

    def scatter(pages: List[int], start: int, count: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Tokens start..start+count-1 of a request (positions over its logical pages) into their slots."""
        pos = torch.arange(start, start + count)
        where = draws.move(torch.stack((phys[torch.tensor(pages, dtype=torch.long)[pos // ps]], pos % ps), dim=1))
        k_cache[where[:, 0], where[:, 1]] = k
        v_cache[where[:, 0], where[:, 1]] = v

    for key, plen, pages in slots_pre:
        scatter(pages, 0, plen, draws("prefix-k", key, plen, hkv), draws("prefix-v", key, plen, hkv))

    qs, ks, vs = [], [], []
    for name, pages in zip(names, full_pages):
        req = spec.request(name)
        qs.append(draws("q", name, req.qo_len, hq))
        ks.append(draws("k", name, req.qo_len, hkv))
        vs.append(draws("v", name, req.qo_len, hkv))
        scatter(pages, req.prefix_len, req.qo_len, ks[-1], vs[-1])

    qo_lens = [spec.request(n).qo_len for n in names]
    prefix_lens = [spec.request(n).prefix_len for n in names]
    physical = phys.tolist()
    return Batch(
        case=case,
        requests=list(names),
        qo_lens=qo_lens,
        prefix_lens=prefix_lens,
        qo_indptr=torch.tensor([0] + torch.tensor(qo_lens).cumsum(0).tolist(), dtype=torch.int32),
        q=torch.cat(qs),
        k=torch.cat(ks),
        v=torch.cat(vs),
        k_cache=k_cache,
        v_cache=v_cache,
        full=PageTable.build([[physical[p] for p in pg] for pg in full_pages],
                             [q + p for q, p in zip(qo_lens, prefix_lens)], ps),
        prefix=PageTable.build([[physical[p] for p in pg] for pg in pre_pages], prefix_lens, ps),
        page_size=ps,
    )
