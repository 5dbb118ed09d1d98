"""A row's error against attention computed from the same inputs in fp64 on the CPU (reference_error: fp64) or
in fp32 on the task's device (fp32): the reference backend's exact attention (one KV tile: a plain softmax) of
each request's rows, and per request the max abs, max rel and max ULP error of its output and LSE.

ULP: |row - reference| in units of the spacing of the row's dtype at the reference value (the output's dtype
for out, float32 for the LSE); rel over the reference's nonzero elements.
"""

from __future__ import annotations

import json
import math
from typing import Dict, List, Tuple

import torch

from ..spec.model import JobSpec
from .backends.reference import attend, finish, gather
from .inputs import Batch

REFERENCE_NAMES = {"fp64": "fp64-cpu", "fp32": "fp32"}


def ulp_of(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of dtype at each |ref| (subnormal spacing below the smallest normal), in ref's dtype."""
    info = torch.finfo(dtype)
    mantissa, emin = round(-math.log2(info.eps)), round(math.log2(info.tiny))
    _, exp = torch.frexp(ref.abs())  # |ref| = m * 2**exp, m in [0.5, 1): its leading bit is 2**(exp - 1)
    lead = torch.where(ref == 0, torch.full_like(exp, emin), exp - 1).clamp_min(emin)
    return torch.ldexp(torch.ones_like(ref), lead - mantissa)


def errors(got: torch.Tensor, ref: torch.Tensor) -> Dict[str, float]:
    """max_abs, max_rel, max_ulp of got (in its own dtype's ULPs) against ref (compared in ref's dtype)."""
    diff = (got.to(ref.dtype) - ref).abs()
    nonzero = ref != 0
    rel = (diff[nonzero] / ref[nonzero].abs()).max().item() if bool(nonzero.any()) else 0.0
    return {"max_abs": diff.max().item(), "max_rel": rel, "max_ulp": (diff / ulp_of(ref, got.dtype)).max().item()}


class RefErrors:
    """One task's reference (kernels/referror.py): each case and phase computed once, on first use."""

    def __init__(self, spec: JobSpec, device: torch.device):
        self.spec, self.kind = spec, spec.reference_error
        self.device = torch.device("cpu") if self.kind == "fp64" else device
        self.dtype = torch.float64 if self.kind == "fp64" else torch.float32
        self.cache: Dict[Tuple[str, str], List[Tuple[torch.Tensor, torch.Tensor]]] = {}

    def reference(self, batch: Batch, phase: str) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """Per request (out, lse base 2) of its rows: prefill its qo_len rows, decode its last row alone."""
        key = (batch.case, phase)
        if key not in self.cache:
            self.cache[key] = [self._request(batch, i, phase) for i in range(len(batch.requests))]
        return self.cache[key]

    def _request(self, batch: Batch, i: int, phase: str) -> Tuple[torch.Tensor, torch.Tensor]:
        spec, plen, n = self.spec, batch.prefix_lens[i], batch.qo_lens[i]
        first = n - 1 if phase == "decode" else 0
        span = batch.span(i)
        q = batch.q[span.start + first : span.stop].to(self.device, self.dtype)
        group = spec.heads.qo // spec.heads.kv
        k, v = (gather(c, batch.full, i, plen + n).to(self.device, self.dtype).repeat_interleave(group, 1)
                for c in (batch.k_cache, batch.v_cache))
        q_pos = torch.arange(plen + first, plen + n, device=self.device)
        causal = spec.causal and phase != "decode"
        return finish(attend(q, k, v, q_pos, 0, plen + n, causal, 1.0 / math.sqrt(spec.head_dim)))

    def rows(self, batch: Batch, phase: str, out: torch.Tensor, lse: torch.Tensor, bounds: List[int]) -> List[str]:
        """The ref_error column of each request's row ("" for a phase without a reference: dllm)."""
        if phase not in ("prefill", "decode"):
            return [""] * (len(bounds) - 1)
        texts = []
        for (ref_out, ref_lse), a, b in zip(self.reference(batch, phase), bounds, bounds[1:]):
            got_out, got_lse = out[a:b].to(self.device), lse[a:b].to(self.device)
            texts.append(json.dumps({"reference": REFERENCE_NAMES[self.kind], "out": errors(got_out, ref_out),
                                     "lse": errors(got_lse, ref_lse)}, sort_keys=True))
        return texts
