"""backend sdpa: torch's scaled_dot_product_attention with one kernel pinned (spec.sdpa.kernel), per request.

Causal with a prefix is bottom-right aligned (query j of a request sits at position prefix_len + j). Per kernel,
what runs and where the LSE comes from (every LSE is turned from natural log into base 2):
- flash (CUDA): aten._scaled_dot_product_flash_attention, whose is_causal is bottom-right (as torch's own
  CausalBias.LOWER_RIGHT calls it); its own logsumexp.
- flash (CPU): aten._scaled_dot_product_flash_attention_for_cpu, with an additive mask for a prefix; its LSE.
- efficient (CUDA): aten._efficient_attention_forward, custom_mask_type 2 (bottom-right causal); its LSE.
- cudnn (CUDA): aten._scaled_dot_product_cudnn_attention, an additive mask for a prefix; its LSE.
- math: the public F.scaled_dot_product_attention (enable_gqa, a boolean mask for a prefix); it returns no
  LSE, so the LSE is computed beside it from q.k in fp32 on the same device.
The fused kernels' ops take as many K/V heads as query heads: K/V are repeat_interleave'd to Hq (a copy of the
same values). Every call runs under sdpa_kernel([the pinned backend]) and the kernel audit checks the kernels
the profiler recorded. Decode: one query row over the whole cache, no mask (every kernel takes it).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .base import BackendUnavailable, Output
from .torch_attn import LN2, Request, TorchAttention

FUSED_ON_CPU = ("flash", "math")


def _backend(kernel: str):
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[kernel]


class SdpaBackend(TorchAttention):
    name = "sdpa"

    def __init__(self, spec, device, stages=None, flags=None):
        super().__init__(spec, device, stages, flags, spec.sdpa)
        self.kernel = spec.sdpa.kernel
        if device.type != "cuda" and self.kernel not in FUSED_ON_CPU:
            raise BackendUnavailable(f"backend sdpa: kernel {self.kernel} needs a CUDA device (this task runs on "
                                     f"{device.type}, where torch has {' and '.join(FUSED_ON_CPU)})")
        self.attn = f"sdpa-{self.kernel}"

    def plan(self, phase: str) -> dict:
        return {"kernel": self.kernel, "device": self.device.type, "phase": phase,
                "gqa": "enable_gqa" if self.kernel == "math" else "repeat_interleave",
                "lse": "fp32 q.k beside the kernel" if self.kernel == "math" else "the kernel's",
                "causal": "bottom-right" if self.spec.causal and phase != "decode" else "none"}

    def run_cell(self, batch, mode: str, path: str, phase: str, repeat: int) -> Output:
        causal = self.spec.causal and phase != "decode"
        calls = self.prepare(batch, path, phase, lambda reqs: [self._inputs(r, causal) for r in reqs])

        def run() -> Tuple[torch.Tensor, torch.Tensor]:
            with _sdpa_kernel(self.kernel):
                outs, lses = zip(*(self._attend(*call) for call in calls))
            return torch.cat(outs), torch.cat(lses)

        return self.output(run, mode, path, phase, batch.case, self.plan(phase), repeat)

    def _inputs(self, r: Request, causal: bool) -> tuple:
        """(q [1,Hq,n,D], k/v [1,H,L,D] (Hkv for math, else repeated to Hq), top-left causal flag, the prefix mask
        as the kernel takes it (None without one), the fp32 additive mask of math's LSE)."""
        n, length = r.q.shape[0], r.kv_len
        q = r.q.transpose(0, 1).unsqueeze(0)
        k, v = (t.transpose(0, 1).unsqueeze(0) for t in (r.k, r.v))
        if self.kernel != "math":
            k, v = (t.repeat_interleave(self.group, dim=1) for t in (k, v))
        square = causal and n == length  # top-left causal is bottom-right then: the kernels' is_causal
        allowed = torch.ones(n, length, dtype=torch.bool, device=q.device).tril(diagonal=length - n)
        additive = torch.zeros(n, length, device=q.device).masked_fill(~allowed, -math.inf) if causal else None
        mask: Optional[torch.Tensor] = None
        if causal and not square and self.kernel in ("cudnn", "flash"):
            # rows padded to 16 elements (cuDNN wants aligned bias strides, as torch's own sdpa pads them)
            mask = torch.zeros(n, -(-length // 16) * 16, dtype=q.dtype, device=q.device)[:, :length]
            mask.copy_(additive)  # type: ignore[arg-type]
            mask = mask[None, None]
        elif causal and not square:
            mask = allowed
        return q, k, v, causal, square, mask, additive

    def _attend(self, q, k, v, causal: bool, square: bool, mask, additive) -> Tuple[torch.Tensor, torch.Tensor]:
        """(out [n,Hq,D], lse [n,Hq] base 2) of one request on the pinned kernel."""
        n, aten = q.shape[2], torch.ops.aten
        if self.kernel == "math":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=square, scale=self.scale,
                                                 enable_gqa=True)
            lse = self._lse_fp32(q, k, additive)
        elif self.kernel == "flash" and q.device.type == "cpu":
            out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, square, attn_mask=mask,
                                                                         scale=self.scale)
        elif self.kernel == "flash":
            out, lse = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=self.scale)[:2]
        elif self.kernel == "efficient":
            res = aten._efficient_attention_forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None,
                                                    None, None, None, None, 0.0, 2 if causal else 0, True,
                                                    scale=self.scale)
            out, lse = res[0].transpose(1, 2), res[1]
        else:  # cudnn
            out, lse = aten._scaled_dot_product_cudnn_attention(q, k, v, mask, True, 0.0, square, False,
                                                                scale=self.scale)[:2]
        heads = q.shape[1]
        lse = lse.float().reshape(heads, -1)[:, :n].transpose(0, 1) / LN2
        return out[0].transpose(0, 1), lse

    def _lse_fp32(self, q, k, additive) -> torch.Tensor:
        """math's LSE [1,Hq,n] (natural log): q.k scaled in fp32 on the device, masked as the kernel was."""
        kr = k.float().repeat_interleave(self.group, dim=1)
        s = torch.matmul(q.float(), kr.transpose(-1, -2)) * self.scale
        return torch.logsumexp(s if additive is None else s + additive, dim=-1)


def _sdpa_kernel(kernel: str):
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel([_backend(kernel)])

