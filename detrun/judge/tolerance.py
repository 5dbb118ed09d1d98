"""What a bound claim (claims.py) measured along one axis of one request, and which of two rows is further from
the reference their backends measured (Row.ref_error). Numbers only; no torch, no Ray."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Tuple, Union

from ..spec.levels import Bound
from .diffstats import DiffStats

Numbers = Union[DiffStats, str, None]  # a pair's diff numbers; why there are none; None: digests equal
_REASONS = 3  # reasons kept for pairs without numbers


@dataclass(frozen=True)
class Measured:
    """Every differing pair along one axis of one request, judged on its output against one bound."""

    bound: Bound
    pairs: int = 0  # pairs of distinct results measured (or that could not be)
    beyond: int = 0  # pairs whose output is beyond the bound
    unmeasured: int = 0  # pairs without numbers: they cannot hold a bound
    worst: float = 0.0  # the largest measured value (the bound's unit)
    worst_pair: str = ""  # "run:key vs run:key"
    worst_text: Tuple[str, ...] = ()  # its output's and LSE's numbers, and the reference's word on them
    reasons: Tuple[str, ...] = ()  # why pairs have no numbers (the first few, distinct)

    @property
    def held(self) -> bool:
        return not self.beyond and not self.unmeasured

    @property
    def failing(self) -> int:
        return self.beyond + self.unmeasured

    def summary(self) -> str:
        """"max 2 ULP" (held), "max 9 ULP > 4", and the pairs that had no numbers."""
        parts = []
        if self.pairs > self.unmeasured:
            over = f" > {self.bound.limit_text}" if self.beyond else ""
            parts.append(f"max {self.bound.value_text(self.worst)}{over}"
                         + (f" in {self.beyond}/{self.pairs} pairs" if self.beyond else ""))
        if self.unmeasured:
            parts.append(f"{self.unmeasured}/{self.pairs} pairs without numbers ({'; '.join(self.reasons)})")
        return "; ".join(parts)

    def add(self, pair: str, out: Numbers, more: Callable[[], Tuple[Numbers, List[str]]]) -> "Measured":
        """This and one more pair, its output's numbers judged against the bound; more() gives its LSE's numbers
        and the reference's word on it, asked only of a pair that becomes the worst."""
        if isinstance(out, str):
            why = f"out: {out}"
            reasons = self.reasons if why in self.reasons or len(self.reasons) >= _REASONS else (*self.reasons, why)
            return replace(self, pairs=self.pairs + 1, unmeasured=self.unmeasured + 1, reasons=reasons)
        value = 0.0 if out is None else out.measured(self.bound.kind)
        done = replace(self, pairs=self.pairs + 1, beyond=self.beyond + (value > self.bound.limit))
        if self.pairs > self.unmeasured and value <= self.worst:
            return done
        lse, reference = more()
        text = [f"{name}: {numbers if isinstance(numbers, str) else numbers.text()}"
                for name, numbers in (("out", out), ("lse", lse)) if numbers is not None]
        return replace(done, worst=value, worst_pair=pair, worst_text=tuple(text + reference))

    def merge(self, other: Optional["Measured"]) -> "Measured":
        """Both requests' (or copies') pairs: counts summed, the worse pair kept."""
        if other is None:
            return self
        mine = self.pairs > self.unmeasured
        theirs = other.pairs > other.unmeasured
        worst = other if theirs and (not mine or other.worst > self.worst) else self
        reasons = tuple(dict.fromkeys(self.reasons + other.reasons))[:_REASONS]
        return replace(worst, pairs=self.pairs + other.pairs, beyond=self.beyond + other.beyond,
                       unmeasured=self.unmeasured + other.unmeasured, reasons=reasons)

    def example(self, axis: str) -> str:
        """The worst pair as an example's lines (a finding shows it beside the recorded mismatches)."""
        head = f"worst pair across {axis} under {self.bound}: {self.worst_pair} ({self.summary()})"
        return "\n".join([head, *(f"  {line}" for line in self.worst_text)])


def _ref_error(row: dict) -> Optional[dict]:
    """A row's ref_error, parsed; None when it has none or it cannot be read."""
    try:
        doc = json.loads(row.get("ref_error") or "null")
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _error_of(doc: dict, which: str) -> Optional[Tuple[float, float, float]]:
    numbers = doc.get(which)
    if not isinstance(numbers, dict):
        return None
    try:
        return tuple(float(numbers.get(k, 0.0)) for k in ("max_abs", "max_rel", "max_ulp"))  # type: ignore[return-value]
    except (TypeError, ValueError):
        return None


def further(a: dict, b: dict) -> List[str]:
    """Which of two rows is further from the reference (per output and LSE), when both recorded their error
    against the same one: judged on max abs, then max rel; [] when either has none."""
    da, db = _ref_error(a), _ref_error(b)
    if da is None or db is None:
        return []
    name_a, name_b = f"{a['run_id']}:{a['key']}", f"{b['run_id']}:{b['key']}"
    if da.get("reference") != db.get("reference"):
        return [f"reference: not compared, the rows' references differ ({da.get('reference')} vs "
                f"{db.get('reference')})"]
    out = []
    for which in ("out", "lse"):
        ea, eb = _error_of(da, which), _error_of(db, which)
        if ea is None or eb is None:
            continue
        said = ("equally far" if ea[:2] == eb[:2] else
                f"{name_a if ea[:2] > eb[:2] else name_b} is further")
        out.append(f"{which} vs {da.get('reference')}: {said} (max abs {ea[0]:.3g} vs {eb[0]:.3g}, "
                   f"max rel {ea[1]:.3g} vs {eb[1]:.3g}, max ULP {ea[2]:.0f} vs {eb[2]:.0f})")
    return out
