"""Diff statistics between two stored tensors (numpy only): count, max abs, max ULP, first index.

ULP distance is counted on one side of zero only: |ordered(a) - ordered(b)|, where ordered() is a bit
pattern's magnitude bits with the float's sign, both zeros at 0 (+0 vs -0 differ in bits, 0 ULP apart).
Two nonzero values of opposite signs "straddle zero": counted apart (with their max abs difference)
and left out of max ULP, which across zero would count every float in between. A NaN counts with abs
difference inf; its ULP distance is its bit pattern's (beyond inf, or a straddle when signs differ).
Besides: max_ulp_across, the largest distance with straddles counted across zero (every float between them:
what a ulp bound is judged on, claims.py); max rel, |a - b| / max(|a|, |b|); a histogram of the differing
elements by ULP distance in power-of-two buckets (0, 1, 2-3, 4-7, 8-15, ...; straddles apart); the first
differing position as (token row, head, column) of an output [tokens, heads, dim], (token, head) of an LSE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import numpy as np

_BITS = {"bfloat16": np.uint16, "float16": np.uint16, "float32": np.uint32, "float64": np.uint64}


@dataclass(frozen=True)
class DiffStats:
    count: int
    total: int
    max_abs: float
    max_ulp: int  # over the differing elements on one side of zero
    first_index: Optional[Tuple[int, ...]]
    straddle: int = 0  # differing elements of opposite signs, neither zero (not in max_ulp)
    straddle_max_abs: float = 0.0
    max_rel: float = 0.0  # |a - b| / max(|a|, |b|) over the differing elements (NaN: inf)
    max_ulp_across: int = 0  # over every differing element, straddles counted across zero
    histogram: Tuple[Tuple[str, int], ...] = field(default=())  # ("2-3", n): differing elements by ULP bucket

    def measured(self, kind: str) -> float:
        """The value a bound of this kind (spec/levels.py) is judged on."""
        return {"ulp": float(self.max_ulp_across), "abs": self.max_abs, "rel": self.max_rel}[kind]

    def text(self) -> str:
        """Every number: counts, max abs and rel, max ULP, the ULP histogram and the first position."""
        all_straddle = self.count > 0 and self.straddle == self.count
        ulp = "- (all straddle zero)" if all_straddle else str(self.max_ulp)
        across = (f"; {self.straddle} straddle zero (max abs {self.straddle_max_abs:.3g}, "
                  f"{self.max_ulp_across} ULP across)" if self.straddle else "")
        buckets = ", ".join(f"{name}: {n}" for name, n in self.histogram)
        return (f"{self.count}/{self.total} differ, max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, "
                f"max ULP {ulp}{across}" + (f"; by ULP {buckets}" if buckets else "")
                + ("" if self.first_index is None else f"; first at {position(self.first_index)}"))

    def __str__(self) -> str:
        all_straddle = self.count > 0 and self.straddle == self.count
        ulp = "- (all straddle zero)" if all_straddle else str(self.max_ulp)
        where = "" if self.first_index is None else f", first at {list(self.first_index)}"
        across = f"; {self.straddle} straddle zero (max abs {self.straddle_max_abs:.3g})" if self.straddle else ""
        return f"{self.count}/{self.total} differ, max abs {self.max_abs:.3g}, max ULP {ulp}{where}{across}"


def position(index: Sequence[int]) -> str:
    """An output's (token, head, column) or an LSE's (token, head) in words; another shape as a list."""
    if len(index) in (2, 3):
        return ", ".join(f"{name} {i}" for name, i in zip(("token", "head", "col"), index))
    return str(list(index))


def bucket_name(k: int) -> str:
    """Bucket k of the histogram: ULP distances of bit length k (0; 1; 2-3; 4-7; ...)."""
    return str(k) if k < 2 else f"{1 << (k - 1)}-{(1 << k) - 1}"


def _histogram(ulps: np.ndarray) -> Tuple[Tuple[str, int], ...]:
    """Counts of ULP distances by bit length (power-of-two buckets), the empty ones left out."""
    if not len(ulps):
        return ()
    _, bits = np.frexp(ulps.astype(np.float64))  # bit length: 0 -> 0, 1 -> 1, 2-3 -> 2, 4-7 -> 3, ...
    counts = np.bincount(bits.astype(np.int64))
    return tuple((bucket_name(k), int(n)) for k, n in enumerate(counts.tolist()) if n)


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
    """Map float bit patterns to integers ordered like the floats, both zeros at 0 (the sign is the float's)."""
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
    va, vb = val_a[differ], val_b[differ]
    with np.errstate(invalid="ignore", divide="ignore"):
        absd = np.abs(va - vb)
        rel = absd / np.maximum(np.abs(va), np.abs(vb))
    absd = np.where(np.isnan(absd), np.inf, absd)
    rel = np.where(absd == 0, 0.0, np.where(np.isnan(rel), np.inf, rel))  # +0 vs -0: 0; NaN or inf: inf
    oa, ob = _ordered(bits_a[differ]), _ordered(bits_b[differ])
    dist = np.abs(oa - ob)
    across = np.sign(oa) * np.sign(ob) < 0
    same = ~across
    ulp = int(dist[same].max()) if same.any() else 0
    first = int(np.flatnonzero(differ)[0])
    index = tuple(int(i) for i in np.unravel_index(first, tuple(shape))) if shape else (first,)
    return DiffStats(count, bits_a.size, float(absd.max()), ulp, index,
                     int(across.sum()), float(absd[across].max()) if across.any() else 0.0,
                     float(rel.max()), int(dist.max()), _histogram(dist[same]))
