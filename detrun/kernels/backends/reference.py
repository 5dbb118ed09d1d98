"""Pure-torch prefill and decode (CPU or GPU): paged and ragged, plus a split-kv variant and a canary.

Attention per request is an online softmax over fixed KV tiles in float32, so the arithmetic depends
only on the request, never on the batch (variant "exact"). A request's last query row is computed on its
own, as the one-row step a decode of that token over the whole cache is (BLAS rounds a row differently
in products of different heights): so exact prefill's last row and exact decode carry the same bits.
"split_kv" splits the KV range into chunks whose size depends on the batch (prefill: as FlashInfer FA2's
planner does; decode: as its decode planner does, a different size), stores partials in the output dtype
and merges them: the same request rounds differently alone and in a batch, and in prefill and decode.
"canary" merges its chunks in a random order: repeats differ, so a runner that calls it reproducible is
broken.
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable, List, Tuple

import torch

from ..inputs import DTYPES, Batch, PageTable
from .base import (
    PATH_DECODE,
    PATH_PAGED,
    PATH_RAGGED_PREFIX,
    AttentionBackend,
    KnownBug,
    Output,
)

State = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # acc [n,H,D], m [n,H], l [n,H]
LN2 = math.log(2.0)


def _empty_state(n: int, h: int, d: int, device, dtype: torch.dtype = torch.float32) -> State:
    return (
        torch.zeros(n, h, d, device=device, dtype=dtype),
        torch.full((n, h), -math.inf, device=device, dtype=dtype),
        torch.zeros(n, h, device=device, dtype=dtype),
    )


def attend(q, k, v, q_pos, k_pos0: int, tile: int, causal: bool, scale: float) -> State:
    """Online softmax of q [n,H,D] over k/v [L,H,D] (heads already expanded), tile by tile, in q's dtype (fp32;
    fp64 for the reference error, kernels/referror.py)."""
    n, h, d = q.shape
    acc, m, l = _empty_state(n, h, d, q.device, q.dtype)
    for start in range(0, k.shape[0], tile):
        kt, vt = k[start : start + tile], v[start : start + tile]
        s = torch.einsum("nhd,thd->nht", q, kt) * scale
        if causal:
            k_pos = torch.arange(k_pos0 + start, k_pos0 + start + kt.shape[0], device=q.device)
            allowed = k_pos[None, :] <= q_pos[:, None]
            s = s.masked_fill(~allowed[:, None, :], -math.inf)
        m_new = torch.maximum(m, s.amax(-1))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe[..., None])
        alpha = torch.exp(m - safe)
        l = l * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + torch.einsum("nht,thd->nhd", p, vt)
        m = m_new
    return acc, m, l


def merge(a: State, b: State) -> State:
    """Combine two online-softmax states (FlashInfer's merge_state, in fp32)."""
    (acc_a, m_a, l_a), (acc_b, m_b, l_b) = a, b
    m = torch.maximum(m_a, m_b)
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(m_a - safe), torch.exp(m_b - safe)
    return acc_a * wa[..., None] + acc_b * wb[..., None], m, l_a * wa + l_b * wb


def finish(state: State) -> Tuple[torch.Tensor, torch.Tensor]:
    """(output fp32 [n,H,D], lse base 2 [n,H]); rows with nothing to attend give 0 and -inf."""
    acc, m, l = state
    out = torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], torch.zeros_like(acc))
    lse = (m + torch.log(l)) / LN2
    return out, lse


def as_partial(state: State, dtype: torch.dtype) -> State:
    """Round a partial result through the output dtype, as FA2 stores tmp_v before merging."""
    out, lse = finish(state)
    l = torch.where(torch.isinf(lse), torch.zeros_like(lse), torch.ones_like(lse))
    return out.to(dtype).float(), lse * LN2, l


def gather(cache: torch.Tensor, table: PageTable, i: int, length: int) -> torch.Tensor:
    pages = table.indices[int(table.indptr[i]) : int(table.indptr[i + 1])].long().to(cache.device)
    return cache[pages].reshape(-1, *cache.shape[2:])[:length]


class ReferenceBackend(AttentionBackend):
    name = "reference"

    def __init__(self, spec, device, stages=None, flags=None):
        super().__init__(spec, device, stages, flags)
        self.opts = spec.reference
        self.group = spec.heads.qo // spec.heads.kv
        self.scale = 1.0 / math.sqrt(spec.head_dim)
        self.dtype = DTYPES[spec.dtype]

    def _chunk(self, batch: Batch) -> int:
        """KV chunk per request: whole KV for exact; batch-dependent for split_kv; small for canary."""
        tile = self.opts.kv_tile
        if self.opts.variant == "exact":
            return 1 << 62
        if self.opts.variant == "canary":
            return 2  # many partials merged in a random order: repeats differ (almost surely)
        n_split = max(1, (2 * self.opts.num_sms) // (len(batch.requests) * self.spec.heads.kv))
        chunk = -(-max(batch.kv_lens) // n_split)
        return -(-chunk // tile) * tile

    def _decode_chunk(self, batch: Batch) -> int:
        """KV chunk of a decode step, in tokens. split_kv as FlashInfer's decode planner picks it: the fewest
        pages per chunk (at least 128 tokens' worth) with which every request's chunks times the KV heads
        fit a grid of 2 x num_sms blocks; no split when the batch fills the grid already."""
        if self.opts.variant != "split_kv":
            return self._chunk(batch)
        ps, heads, grid = batch.page_size, self.spec.heads.kv, 2 * self.opts.num_sms
        pages = [max(1, -(-kv // ps)) for kv in batch.kv_lens]
        if len(pages) * heads >= grid:
            return max(pages) * ps  # one chunk per request
        low, high = max(128 // ps, 1), max(pages)
        while low < high:
            mid = (low + high) // 2
            if sum(-(-p // mid) for p in pages) * heads > grid:
                low = mid + 1
            else:
                high = mid
        return low * ps

    def _attend_range(self, q, k, v, q_pos, k0: int, chunk: int) -> State:
        causal, tile = self.spec.causal, self.opts.kv_tile
        k = k.float().repeat_interleave(self.group, dim=1)
        v = v.float().repeat_interleave(self.group, dim=1)
        parts: List[State] = []
        for start in range(0, k.shape[0], chunk):
            parts.append(attend(q, k[start : start + chunk], v[start : start + chunk],
                                q_pos, k0 + start, tile, causal, self.scale))
        if len(parts) == 1:
            return parts[0]
        parts = [as_partial(p, self.dtype) for p in parts]
        if self.opts.variant == "canary":
            order = torch.randperm(len(parts), generator=torch.Generator().manual_seed(
                int.from_bytes(os.urandom(8), "little") >> 1)).tolist()
            parts = [parts[j] for j in order]
        state = parts[0]
        for p in parts[1:]:
            state = merge(state, p)
        return state

    def _request(self, batch: Batch, i: int, path: str, chunk: int, rows: Tuple[int, int]) -> State:
        """Prefill of query rows [rows) of request i (0 is its first new token)."""
        span = batch.span(i)
        q = batch.q[span.start + rows[0] : span.start + rows[1]].float()
        plen, n = batch.prefix_lens[i], batch.qo_lens[i]
        q_pos = torch.arange(plen + rows[0], plen + rows[1], device=q.device)
        if path == PATH_PAGED:
            k = gather(batch.k_cache, batch.full, i, plen + n)
            v = gather(batch.v_cache, batch.full, i, plen + n)
            return self._attend_range(q, k, v, q_pos, 0, chunk)
        new = self._attend_range(q, batch.k[span], batch.v[span], q_pos, plen, chunk)
        if path != PATH_RAGGED_PREFIX:
            return new
        k = gather(batch.k_cache, batch.prefix, i, plen)
        v = gather(batch.v_cache, batch.prefix, i, plen)
        # SGLang: ragged over new tokens (causal) + paged over the prefix (non-causal), merged.
        pre = _empty_state(q.shape[0], q.shape[1], q.shape[2], q.device) if plen == 0 else \
            self._attend_range(q, k, v, q_pos, 0, chunk)
        return merge(new, pre)

    def _prefill(self, batch: Batch, i: int, path: str, chunk: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(out, lse) of request i: its rows but the last, then its last row on its own (as decode computes it)."""
        n = batch.qo_lens[i]
        parts = [finish(self._request(batch, i, path, chunk, rows)) for rows in ((0, n - 1), (n - 1, n))
                 if rows[1] > rows[0]]
        return torch.cat([out for out, _ in parts]).to(batch.q.dtype), torch.cat([lse for _, lse in parts])

    def _fault(self, case: str) -> None:
        """The negative controls of crash isolation (reference.faults)."""
        fault = self.opts.faults.get(case)
        if fault in ("known_bug_crash", "known_bug_pass") and not self.force_known_bugs:
            raise KnownBug(f"reference fault {fault} in case {case} (a known bug; run isolated)")
        if fault in ("crash", "known_bug_crash"):
            os._exit(13)  # the process dies, as a kernel that takes the driver down would
        if fault == "hang":
            while True:
                time.sleep(60)

    def forward(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        self._fault(batch.case)
        mode = self.prefill_mode(mode, batch)
        path = self.path_for(mode, batch)
        chunk = self._chunk(batch)

        def run() -> Tuple[torch.Tensor, torch.Tensor]:
            outs, lses = zip(*(self._prefill(batch, i, path, chunk) for i in range(len(batch.requests))))
            return torch.cat(outs), torch.cat(lses)

        return self._output(batch, mode, path, chunk, run)

    def forward_decode(self, batch: Batch, mode: str, repeat: int = 0) -> Output:
        """One token per request, its last query row, over its whole cache: the paged arithmetic of that row
        (so exact equals prefill's last row); split_kv chunks the KV as FlashInfer's decode planner does."""
        self._fault(batch.case)
        chunk = self._decode_chunk(batch)

        def run() -> Tuple[torch.Tensor, torch.Tensor]:
            parts = [finish(self._request(batch, i, PATH_PAGED, chunk, (n - 1, n)))
                     for i, n in enumerate(batch.qo_lens)]
            return torch.cat([out for out, _ in parts]).to(batch.q.dtype), torch.cat([lse for _, lse in parts])

        return self._output(batch, mode, PATH_DECODE, chunk, run)

    def _output(self, batch: Batch, mode: str, path: str, chunk: int,
                run: Callable[[], Tuple[torch.Tensor, torch.Tensor]]) -> Output:
        """Run (eager) or capture and replay (cudagraph) one planned computation; its recorded plan."""
        split = [-(-kv // chunk) > 1 for kv in batch.kv_lens]
        plan = {
            "variant": self.opts.variant,
            "kv_tile": self.opts.kv_tile,
            "kv_chunk_size": None if self.opts.variant == "exact" else chunk,
            "split_kv": any(split),
            # each request's last query row computed on its own (rows stored before this computed it with
            # the others: where their bits differ, this field says why)
            "last_row_alone": True,
        }
        # The canary's disorder is drawn on the host: a replayed graph would freeze it, so it recaptures.
        key = None if self.opts.variant == "canary" else (batch.case, path)
        (out, lse), timer = self._execute(run, mode, key=key, plan=plan)
        kernel = f"reference.{self.opts.variant}.{path}"
        return Output(out=out, lse=lse, path=path, attn=f"torch-{self.opts.variant}",
                      plan=plan, kernels=[kernel], timer=timer)
