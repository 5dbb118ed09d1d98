"""Claims: what must hold along each comparison axis, from the job spec, --expect and --strict.

Levels, strictest first: `bitwise` (any difference breaks the claim, the plan is shown as the cause),
`explained` (a difference breaks it unless the recorded plans, paths or environments explain it),
`ignore` (differences are shown, never counted); or a bound on the numbers (spec/levels.py): `ulp:N`, `abs:X`,
`rel:X`. A bound is judged on numbers, never on explanations: every pair of rows that differ along the axis
(each two distinct results of a group, whatever their plans) is measured from its stored tensors; the pair holds
when its measured value is <= the bound (ulp: the largest ULP distance, counted across zero where signs differ;
abs: max |a - b|; rel: max |a - b| / max(|a|, |b|); NaN beside a number: beyond any bound). A pair without
numbers (no tensors stored, a blob missing) cannot hold it: a failure saying why.
The bound applies to the attention output only; the LSE's numbers are measured and shown beside it. The output
is what the next layer and the logprobs consume, and the LSE is an fp32 by-product whose ULP is not the output's
(one bf16 ULP is 65536 fp32 ULPs), so one N cannot mean the same on both.
The cross-run axes default otherwise: `backend` to ignore (another backend's bits are shown, a parity claim is
the job's to state), `version` to explained (what explains there: judge/compare.py). No torch, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, cast

from ..errors import DetrunError
from ..spec.levels import SAYS, Bound, bound_of, checked_level

AXIS_NAMES = ("repeat", "gpu", "mode", "batch", "phase", "run", "backend", "version")
CROSS_RUN = ("backend", "version")  # axes whose rows of different values are always of different runs
LEVELS = ("bitwise", "explained", "ignore")  # strictest first
DEFAULT_LEVEL = "explained"
DEFAULTS = {"backend": "ignore"}  # axis -> its default level where not DEFAULT_LEVEL


@dataclass(frozen=True)
class Checks:
    """What a compare, submit or report checks: claims overrides, baseline handling, examples shown."""

    baseline: bool = False  # against the golden baseline of the run's fingerprint
    require_baseline: bool = False  # a nearest-fingerprint (provisional) or missing baseline fails
    strict: bool = False  # every axis bitwise
    expect: Mapping[str, str] = field(default_factory=dict)  # axis -> level, over the specs'
    details: int = 3  # examples shown per (axis, cause)


@dataclass(frozen=True)
class Claims:
    levels: Mapping[str, str]  # axis -> level, every axis
    stated: FrozenSet[str] = frozenset()  # axes the job states: its spec's expect (or deterministic), --expect
    strict: bool = False  # --strict: every axis bitwise, the stated ones and the rest

    def required(self, axis: str) -> bool:
        """Whether nothing compared along axis fails the verdict: the job stated a claim there."""
        return axis in self.stated and self.levels[axis] != "ignore"

    def level(self, axis: str) -> str:
        return self.levels[axis]

    def bound(self, axis: str) -> Optional[Bound]:
        """The bound claimed along axis (None: a named level)."""
        return bound_of(self.levels[axis])

    def claimed(self) -> List[str]:
        """The axes whose differences count (not ignored), in axis order."""
        return [a for a in AXIS_NAMES if self.levels[a] != "ignore"]

    def describe(self) -> str:
        return ", ".join(f"{a} {self.levels[a]}" for a in AXIS_NAMES)


def spec_levels(spec: Mapping[str, object]) -> Dict[str, str]:
    """The levels a job spec (as a dict) states: its `expect`, and batch bitwise under `deterministic: true`."""
    levels = {"batch": "bitwise"} if spec.get("deterministic") else {}
    levels.update(dict(cast(Mapping[str, str], spec.get("expect") or {})))
    return levels


def parse_expect(items: Iterable[str], option: str = "--expect") -> Dict[str, str]:
    """AXIS=LEVEL items (e.g. batch=bitwise, batch=ulp:4) -> {axis: level}; a bad item is a DetrunError naming it."""
    out: Dict[str, str] = {}
    for item in items:
        axis, sep, level = item.partition("=")
        if not sep or axis not in AXIS_NAMES:
            raise DetrunError(f"{option} {item!r}: expected AXIS=LEVEL with AXIS one of {', '.join(AXIS_NAMES)} "
                              f"and LEVEL one of {SAYS}")
        try:
            out[axis] = checked_level(level)
        except ValueError as exc:
            raise DetrunError(f"{option} {item!r}: {exc}") from None
    return out


def _rank(level: str) -> tuple:
    """Strictest first: bitwise, a bound (ulp, then abs, then rel: a fixed order, the smaller of one kind first),
    explained, ignore."""
    bound = bound_of(level)
    if bound is None:
        return (LEVELS.index(level) + (level != "bitwise"), 0, 0.0)
    return (1, ("ulp", "abs", "rel").index(bound.kind), bound.limit)


def claims_of(specs: Sequence[Mapping[str, object]], expect: Optional[Mapping[str, str]] = None,
              strict: bool = False) -> Claims:
    """Each axis at the strictest level the runs' specs state, then --expect, then --strict (all bitwise).
    --strict states no claim of its own: an axis only it claims and nothing compares is a note, not a failure."""
    levels = {axis: DEFAULTS.get(axis, DEFAULT_LEVEL) for axis in AXIS_NAMES}
    stated = set()
    for spec in specs:
        for axis, level in spec_levels(spec).items():
            if axis not in stated or _rank(level) < _rank(levels[axis]):
                levels[axis] = level
            stated.add(axis)
    for axis, level in (expect or {}).items():
        levels[axis] = level
        stated.add(axis)
    if strict:
        levels = dict.fromkeys(AXIS_NAMES, "bitwise")
    return Claims(levels, frozenset(stated), strict)
