"""backend flex: FlexAttention (torch.nn.attention.flex_attention) over a cell's requests packed into one
sequence: queries and keys carry their request (document) and position, and the block mask lets a query see
the keys of its own request at or before its position (bottom-right causal over prefix + new tokens). Its
LSE is flex's own (return_aux=AuxRequest(lse=True), natural log: stored in base 2). GQA through enable_gqa.
Decode: each request's last query row over its whole cache, in the same packed form. Compiled (torch.compile)
on CUDA by default; on the CPU it runs eager (torch's unfused implementation) unless flex.compile says otherwise.
"""

from __future__ import annotations

from typing import List, Tuple

import torch

from .base import Output
from .torch_attn import LN2, Request, TorchAttention

_COMPILED: dict = {}


def _lse_request() -> dict:
    """flex_attention's argument that returns the LSE: return_aux=AuxRequest(lse=True) (torch >= 2.9; return_lse
    is deprecated there), else return_lse=True."""
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:
        return {"return_lse": True}
    return {"return_aux": AuxRequest(lse=True)}


_LSE = _lse_request()


def _flex(compiled: bool):
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return flex_attention
    if "fn" not in _COMPILED:
        import torch._dynamo

        # every case and phase is a shape and mask of its own: a recompile each, never the silent eager fallback
        # past dynamo's default limit (8)
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 1024)
        _COMPILED["fn"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["fn"]


class FlexBackend(TorchAttention):
    name = "flex"

    def __init__(self, spec, device, stages=None, flags=None):
        super().__init__(spec, device, stages, flags, spec.flex)
        self.compiled = spec.flex.compile if spec.flex.compile is not None else device.type == "cuda"
        # flex: compiled to Triton (the audit wants a Triton kernel); flex-eager: torch's unfused implementation
        self.attn = "flex-eager" if not self.compiled else "flex" if device.type == "cuda" else "flex-cpp"

    def plan(self, phase: str) -> dict:
        return {"kernel": "flex", "compiled": self.compiled, "block_size": self.opts.block_size, "phase": phase,
                "packing": "one sequence, document mask", "gqa": "enable_gqa",
                "lse": "the kernel's (AuxRequest(lse=True))"}

    def run_cell(self, batch, mode: str, path: str, phase: str, repeat: int) -> Output:
        causal = self.spec.causal and phase != "decode"
        with self.stages("plan"):
            q, k, v, mask = self.prepare(batch, path, phase, lambda reqs: self._packed(reqs, causal))
        flex = _flex(self.compiled)

        def run() -> Tuple[torch.Tensor, torch.Tensor]:
            out, lse = flex(q, k, v, block_mask=mask, scale=self.scale, enable_gqa=True, **_LSE)
            lse = getattr(lse, "lse", lse)  # AuxOutput (torch >= 2.9), else the tensor
            return out[0].transpose(0, 1), lse[0].transpose(0, 1).float() / LN2

        return self.output(run, mode, path, phase, batch.case, self.plan(phase), repeat)

    def _packed(self, reqs: List[Request], causal: bool) -> tuple:
        """q [1,Hq,T,D], k/v [1,Hkv,S,D] of the requests side by side, and their block mask."""
        from torch.nn.attention.flex_attention import create_block_mask

        device = self.device
        q_doc = torch.cat([torch.full((r.q.shape[0],), i) for i, r in enumerate(reqs)]).to(device)
        kv_doc = torch.cat([torch.full((r.kv_len,), i) for i, r in enumerate(reqs)]).to(device)
        q_pos = torch.tensor([p for r in reqs for p in r.q_pos]).to(device)
        kv_pos = torch.cat([torch.arange(r.kv_len) for r in reqs]).to(device)

        def mask_mod(b, h, qi, ki):
            same = q_doc[qi] == kv_doc[ki]
            return same & (kv_pos[ki] <= q_pos[qi]) if causal else same

        q = torch.cat([r.q for r in reqs]).transpose(0, 1).unsqueeze(0)
        k, v = (torch.cat([getattr(r, t) for r in reqs]).transpose(0, 1).unsqueeze(0) for t in ("k", "v"))
        mask = create_block_mask(mask_mod, 1, None, q.shape[2], k.shape[2], device=device,
                                 BLOCK_SIZE=self.opts.block_size)
        return q, k, v, mask
