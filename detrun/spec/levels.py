"""Claim levels as a job's `expect:` and --expect write them: bitwise, explained, ignore, or a bound on the
numbers, `ulp:N` (N a whole number >= 0), `abs:X` or `rel:X` (X a finite number >= 0). judge/claims.py says
what each means; here only their grammar (a spec, which cannot import the judge, checks it too)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

NAMED = ("bitwise", "explained", "ignore")  # strictest first
BOUND_KINDS = ("ulp", "abs", "rel")
SAYS = "bitwise, explained, ignore, ulp:N, abs:X or rel:X"


@dataclass(frozen=True)
class Bound:
    """ulp: the largest ULP distance allowed; abs: |a - b|; rel: |a - b| / max(|a|, |b|)."""

    kind: str
    limit: float

    def __str__(self) -> str:
        return f"{self.kind}:{self.limit_text}"

    @property
    def limit_text(self) -> str:
        """The limit as written back: 4, 0.001, 0 (a whole number without ".0")."""
        return str(int(self.limit)) if self.limit.is_integer() else repr(self.limit)

    def value_text(self, value: float) -> str:
        """A measured value in the bound's unit: "9 ULP", "abs 0.0312", "rel 0.00391"."""
        return f"{int(value)} ULP" if self.kind == "ulp" and math.isfinite(value) else f"{self.kind} {value:.3g}"


def bound_of(level: str) -> Optional[Bound]:
    """The Bound a level states (None for bitwise, explained, ignore); a bad one is a ValueError saying why."""
    if level in NAMED:
        return None
    kind, sep, text = level.partition(":")
    if not sep or kind not in BOUND_KINDS:
        raise ValueError(f"{level!r} is not a claim level: one of {SAYS}")
    try:
        limit = float(int(text)) if kind == "ulp" else float(text)
    except ValueError:
        limit = -1.0
    if not math.isfinite(limit) or limit < 0:
        what = "a whole number >= 0" if kind == "ulp" else "a finite number >= 0"
        raise ValueError(f"{level!r}: {kind}'s bound must be {what}")
    return Bound(kind, limit)


def checked_level(level: str) -> str:
    """A level as written, checked, bounds in their one spelling (abs:1e-3 -> abs:0.001); else a ValueError."""
    bound = bound_of(level)
    return level if bound is None else str(bound)
