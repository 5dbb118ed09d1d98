"""Diff statistics between two stored tensors (numpy only): count, max abs, max ULP, first index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

_BITS = {"bfloat16": np.uint16, "float16": np.uint16, "float32": np.uint32, "float64": np.uint64}


@dataclass(frozen=True)
class DiffStats:
    count: int
    total: int
    max_abs: float
    max_ulp: int
    first_index: Optional[Tuple[int, ...]]

    def __str__(self) -> str:
        where = "" if self.first_index is None else f", first at {list(self.first_index)}"
        return (f"{self.count}/{self.total} differ, max abs {self.max_abs:.3g}, "
                f"max ULP {self.max_ulp}{where}")


def decode(raw: bytes, dtype: str) -> Tuple[np.ndarray, np.ndarray]:
    """(bits as unsigned ints, values as float64) of a stored tensor."""
    if dtype not in _BITS:
        raise ValueError(f"no diff statistics for dtype {dtype}")
    bits = np.frombuffer(raw, dtype=_BITS[dtype])
    if dtype == "bfloat16":
        values = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        values = bits.view({"float16": np.float16, "float32": np.float32,
                            "float64": np.float64}[dtype]).astype(np.float64)
    return bits, values


def _ordered(bits: np.ndarray) -> np.ndarray:
    """Map float bit patterns to integers that are ordered like the floats (ULP distance = difference)."""
    width = bits.dtype.itemsize * 8
    sign = np.uint64(1) << np.uint64(width - 1)
    b = bits.astype(np.uint64)
    mag = (b & (sign - np.uint64(1))).astype(np.int64)
    return np.where((b & sign) != 0, -mag, mag)


def diff_stats(a: bytes, b: bytes, dtype: str, shape: Sequence[int]) -> DiffStats:
    bits_a, val_a = decode(a, dtype)
    bits_b, val_b = decode(b, dtype)
    if bits_a.shape != bits_b.shape:
        raise ValueError(f"tensors differ in size: {bits_a.size} vs {bits_b.size} elements")
    differ = bits_a != bits_b
    count = int(differ.sum())
    if not count:
        return DiffStats(0, bits_a.size, 0.0, 0, None)
    with np.errstate(invalid="ignore"):
        absd = np.abs(val_a[differ] - val_b[differ])
    absd = np.where(np.isnan(absd), np.inf, absd)
    ulp = np.abs(_ordered(bits_a[differ]) - _ordered(bits_b[differ]))
    first = int(np.flatnonzero(differ)[0])
    index = tuple(int(i) for i in np.unravel_index(first, tuple(shape))) if shape else (first,)
    return DiffStats(count, bits_a.size, float(absd.max()), int(ulp.max()), index)
