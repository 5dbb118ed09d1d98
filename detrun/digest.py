"""Bitwise digests of tensors, computed on the tensor's own device.

Each element's raw bits are mixed with its index (splitmix64) and summed mod 2**64, in two lanes:
order-free integer arithmetic, so the digest does not depend on how the reduction is scheduled, and
changing any one element always changes both lanes. dtype and shape are part of the digest.
"""

from __future__ import annotations

import hashlib

import torch

_WORD = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


_C1, _C2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)
_SALTS = (_signed(0x9E3779B97F4A7C15), _signed(0xD1B54A32D192ED03))


def _srl(x: torch.Tensor, n: int) -> torch.Tensor:
    return (x >> n) & ((1 << (64 - n)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ _srl(x, 30)
    x = x * _C1
    x = x ^ _srl(x, 27)
    x = x * _C2
    return x ^ _srl(x, 31)


def _lanes(t: torch.Tensor) -> bytes:
    size = t.element_size()
    words = t.contiguous().view(-1).view(_WORD[size]).to(torch.int64)
    if size < 8:
        words = words & ((1 << (8 * size)) - 1)
    idx = torch.arange(words.numel(), device=t.device, dtype=torch.int64)
    sums = torch.stack([_mix(words ^ _mix(idx + salt)).sum() for salt in _SALTS])
    return sums.cpu().numpy().tobytes()


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def tensor_digest(t: torch.Tensor) -> str:
    """128-bit hex digest of (dtype, shape, raw bytes); only 16 bytes leave the device."""
    head = f"{dtype_name(t)}|{'x'.join(map(str, t.shape))}|".encode()
    return hashlib.blake2b(head + _lanes(t), digest_size=16).hexdigest()


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw bytes (host copy), kept only for the first tensor seen with a digest."""
    flat = t.detach().contiguous().view(-1)
    return flat.view(_WORD[t.element_size()]).cpu().numpy().tobytes()
