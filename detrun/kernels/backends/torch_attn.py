"""What the trainer-side backends (sdpa, flex) share: each request's K/V gathered on the device once per case
and path (a graph capture then copies nothing from the host, and a replay reads the tensors it captured), the
kernels torch ran (CUDA kernels; on the CPU the aten attention ops), and a capture torch refuses as Unsupported."""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Hashable, List, Tuple

import torch

from ...errors import first_line
from ...record.attn import torch_family
from ..inputs import Batch, PageTable
from .base import PATH_DECODE, PATH_PAGED, AttentionBackend, Output, Unsupported
from .profiling import KernelProfiling

LN2 = math.log(2.0)


def slots(table: PageTable, i: int, length: int, page_size: int) -> torch.Tensor:
    """Flat cache slots (page * page_size + offset) of request i's first `length` tokens (int64, CPU)."""
    pages = table.indices[int(table.indptr[i]) : int(table.indptr[i + 1])].long()
    return (pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)[:length]


@dataclass
class Request:
    """One request's inputs to a torch attention call: q [n,Hq,D], k/v [L,Hkv,D], q_pos: each query's position."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_pos: List[int]

    @property
    def kv_len(self) -> int:
        return self.k.shape[0]


class TorchAttention(KernelProfiling, AttentionBackend):
    """Base of sdpa and flex: attn names the kernel family, opts its spec options (profile_kernels, ...)."""

    attn = "?"

    def __init__(self, spec, device, stages=None, flags=None, opts=None):
        super().__init__(spec, device, stages, flags)
        self.opts = opts
        self.group = spec.heads.qo // spec.heads.kv
        self.scale = 1.0 / math.sqrt(spec.head_dim)
        self._profiled_plans = set()
        self.prepared: Dict[Hashable, Any] = {}

    def requests(self, batch: Batch, path: str) -> List[Request]:
        """Each request's q and K/V on the device. Decode: its last query row over its whole cache; prefill: its
        new rows over prefix + new KV, read from the cache (paged) or from the new k/v after the cached prefix
        (ragged): the same values either way."""
        ps = batch.page_size
        kc, vc = (c.reshape(-1, *c.shape[2:]) for c in (batch.k_cache, batch.v_cache))
        out = []
        for i, (n, plen) in enumerate(zip(batch.qo_lens, batch.prefix_lens)):
            span = batch.span(i)
            if path == PATH_DECODE or path == PATH_PAGED:
                idx = slots(batch.full, i, plen + n, ps).to(kc.device)
                k, v = kc[idx], vc[idx]
            else:
                idx = slots(batch.prefix, i, plen, ps).to(kc.device)
                k, v = torch.cat([kc[idx], batch.k[span]]), torch.cat([vc[idx], batch.v[span]])
            if path == PATH_DECODE:
                out.append(Request(batch.q[span.stop - 1 : span.stop], k, v, [plen + n - 1]))
            else:
                out.append(Request(batch.q[span], k, v, list(range(plen, plen + n))))
        return out

    def prepare(self, batch: Batch, path: str, phase: str, build: Callable[[List[Request]], Any]) -> Any:
        """build(requests) once per case, path and phase (kept alive: a captured graph reads these tensors)."""
        key = (batch.case, path, phase)
        if key not in self.prepared:
            self.prepared[key] = build(self.requests(batch, path))
        return self.prepared[key]

    def kernels_ran(self, run, mode: str, path: str, plan: Dict[str, object], repeat: int) -> List[str]:
        """The kernels one more run recorded (a cell _profiled picks; else none): CUDA kernels on a GPU, the aten
        attention ops (those judge.audit names a family) on the CPU."""
        if not self._profiled(repeat, path, plan):
            return []
        if self.device.type == "cuda":
            return self._kernels(run, mode == "cudagraph")
        from torch.profiler import ProfilerActivity, profile

        with self.stages("profile"), profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        return sorted({e.name for e in prof.events() if torch_family(e.name)})

    def output(self, run: Callable[[], Tuple[torch.Tensor, torch.Tensor]], mode: str, path: str, phase: str,
               case: str, plan: Dict[str, object], repeat: int) -> Output:
        """Run or capture+replay; a capture torch refuses is Unsupported with its reason."""
        try:
            (out, lse), timer = self._execute(run, mode, key=(case, path, phase), plan=plan)
        except RuntimeError as exc:
            if mode != "cudagraph" or "captur" not in str(exc).lower():
                raise
            raise Unsupported(f"{self.attn}: torch cannot capture this in a CUDA graph: {first_line(exc)}") from exc
        kernels = self.kernels_ran(run, mode, path, plan, repeat)
        return Output(out=out, lse=lse, path=path, attn=self.attn, plan=plan, kernels=kernels, timer=timer)

    def forward(self, batch, mode, repeat=0) -> Output:
        """Prefill on SGLang's path for the flag, as the other backends record it (the K/V values are the same on
        every path; only where they are read from differs)."""
        mode = self.prefill_mode(mode, batch)
        return self.run_cell(batch, mode, self.path_for(mode, batch), "prefill", repeat)

    def forward_decode(self, batch, mode, repeat=0) -> Output:
        return self.run_cell(batch, mode, PATH_DECODE, "decode", repeat)

    @abc.abstractmethod
    def run_cell(self, batch: Batch, mode: str, path: str, phase: str, repeat: int) -> Output:
        """One cell of a phase on a path."""

