"""Kernel audit: the CUDA kernels a row recorded must match the wrapper path it says it took.

The path names live here (no torch), and the backends take them from here."""

from __future__ import annotations

from typing import Iterable, Optional

PATH_PAGED = "paged"
PATH_RAGGED = "ragged"
PATH_RAGGED_PREFIX = "ragged+paged-prefix"  # ragged over new tokens + paged over the cached prefix, merged
PATH_DECODE = "decode"  # one new token per request over its whole paged cache (forward_decode)


def is_ragged_kernel(name: str) -> bool:
    """FlashInfer's ragged prefill kernels: FA2 BatchPrefillWithRaggedKVCacheKernel, FA3 RaggedParams."""
    return "RaggedKVCache" in name or "RaggedParams" in name


def is_paged_kernel(name: str) -> bool:
    return "PagedKVCache" in name or "PagedParams" in name


def audit_kernels(path: str, kernels: Iterable[str]) -> Optional[str]:
    """None if the kernels fit the path; else what is wrong. Rows without recorded kernels pass."""
    names = [k for k in kernels if k.startswith("flashinfer::") or "flashinfer" in k]
    if not names:
        return None
    ragged = [k for k in names if is_ragged_kernel(k)]
    paged = [k for k in names if is_paged_kernel(k)]
    if path == PATH_PAGED and ragged:
        return f"path paged but a ragged kernel ran: {ragged[0][:120]}"
    if path in (PATH_RAGGED, PATH_RAGGED_PREFIX) and not ragged:
        return "path ragged but no ragged kernel ran"
    if path in (PATH_PAGED, PATH_RAGGED_PREFIX) and not paged:
        return f"path {path} but no paged kernel ran"
    return None
