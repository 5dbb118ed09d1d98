"""Kernel audit: the CUDA kernels a row recorded must match the wrapper path it says it took, and a torch row
(backends sdpa, flex) the kernel it pinned (its attn).

The path names are the record's (record/paths.py), where the backends take them from too."""

from __future__ import annotations

from typing import Iterable, List, Optional

from ..record.attn import torch_family
from ..record.paths import PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX


def is_ragged_kernel(name: str) -> bool:
    """FlashInfer's ragged prefill kernels: FA2 BatchPrefillWithRaggedKVCacheKernel, FA3 RaggedParams."""
    return "RaggedKVCache" in name or "RaggedParams" in name


def is_flashinfer_kernel(name: str) -> bool:
    """A FlashInfer kernel (the ones the audit reads; fills, copies and torch's own are not)."""
    return "flashinfer" in name


def is_paged_kernel(name: str) -> bool:
    return "PagedKVCache" in name or "PagedParams" in name


def is_torch_attn(attn: str) -> bool:
    return attn.startswith(("sdpa-", "flex"))


def audit_torch(attn: str, kernels: Iterable[str]) -> Optional[str]:
    """A torch row: no attention kernel of another family than the pinned one (sdpa-math: no fused kernel;
    flex: no SDPA kernel), and the pinned fused SDPA kernel ran; flex compiled for CUDA (attn flex) ran Triton
    kernels (inductor's: not torch's eager fallback); flex-eager and flex-cpp run plain ops."""
    names = list(kernels)
    found = {n: torch_family(n) for n in names}
    flex = attn.startswith("flex")
    other = [n for n, f in found.items() if f is not None and f != attn
             and not (flex and f in ("flex", "sdpa-math"))]  # flex eager's unfused softmax
    if other:
        return f"pinned {attn} but a {found[other[0]]} kernel ran: {other[0][:120]}"
    recorded = ", ".join(n[:60] for n in names[:3])
    if attn == "flex" and not any(n.startswith("triton") for n in names):
        return f"flex compiled but no Triton kernel ran (torch's eager fallback?): {recorded}"
    if not flex and attn != "sdpa-math" and attn not in found.values():
        return f"pinned {attn} but no {attn} kernel ran (recorded: {recorded})"
    return None


def audit_kernels(path: str, kernels: Iterable[str], attn: str = "") -> Optional[str]:
    """None if the kernels fit the path (and a torch row's pinned kernel); else what is wrong. Rows without
    recorded kernels pass."""
    if is_torch_attn(attn):
        kernels = list(kernels)
        return audit_torch(attn, kernels) if kernels else None
    names = [k for k in kernels if is_flashinfer_kernel(k)]
    if not names:
        return None
    ragged = [k for k in names if is_ragged_kernel(k)]
    if path == "decode":  # PATH_DECODE
        return _audit_decode(names, ragged)
    paged = [k for k in names if is_paged_kernel(k)]
    if path == PATH_PAGED and ragged:
        return f"path paged but a ragged kernel ran: {ragged[0][:120]}"
    if path in (PATH_RAGGED, PATH_RAGGED_PREFIX) and not ragged:
        return "path ragged but no ragged kernel ran"
    if path in (PATH_PAGED, PATH_RAGGED_PREFIX) and not paged:
        return f"path {path} but no paged kernel ran"
    return None


def _audit_decode(names: List[str], ragged: List[str]) -> Optional[str]:
    """Decode runs one paged family: BatchDecodeWithPagedKVCache (CUDA cores) or, with tensor cores, the FA2
    BatchPrefillWithPagedKVCache kernel; a merge kernel beside it when split."""
    if ragged:
        return f"path decode but a ragged kernel ran: {ragged[0][:120]}"
    cuda_core = [k for k in names if "BatchDecodeWithPagedKVCache" in k]
    tensor_core = [k for k in names if is_paged_kernel(k) and k not in cuda_core]
    if not cuda_core and not tensor_core:
        return "path decode but no paged kernel ran (BatchDecodeWithPagedKVCache; with tensor cores BatchPrefill...)"
    if cuda_core and tensor_core:
        return f"path decode ran both the CUDA-core and the tensor-core kernel: {tensor_core[0][:120]}"
    return None
