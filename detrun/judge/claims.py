"""Claims: what must hold along each comparison axis, from the job spec, --expect and --strict.

Levels, strictest first: `bitwise` (any difference breaks the claim, the plan is shown as the cause),
`explained` (a difference breaks it unless the recorded plans, paths or environments explain it),
`ignore` (differences are shown, never counted). No torch, no Ray.
The cross-run axes default otherwise: `backend` to ignore (another backend's bits are shown, a parity claim is
the job's to state), `version` to explained (what explains there: judge/compare.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, cast

from ..errors import DetrunError

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
    """AXIS=LEVEL items (e.g. batch=bitwise) -> {axis: level}; a bad item is a DetrunError naming it."""
    out: Dict[str, str] = {}
    for item in items:
        axis, sep, level = item.partition("=")
        if not sep or axis not in AXIS_NAMES or level not in LEVELS:
            raise DetrunError(f"{option} {item!r}: expected AXIS=LEVEL with AXIS one of {', '.join(AXIS_NAMES)} "
                              f"and LEVEL one of {', '.join(LEVELS)}")
        out[axis] = level
    return out


def claims_of(specs: Sequence[Mapping[str, object]], expect: Optional[Mapping[str, str]] = None,
              strict: bool = False) -> Claims:
    """Each axis at the strictest level the runs' specs state, then --expect, then --strict (all bitwise).
    --strict states no claim of its own: an axis only it claims and nothing compares is a note, not a failure."""
    levels = {axis: DEFAULTS.get(axis, DEFAULT_LEVEL) for axis in AXIS_NAMES}
    stated = set()
    for spec in specs:
        for axis, level in spec_levels(spec).items():
            if axis not in stated or LEVELS.index(level) < LEVELS.index(levels[axis]):
                levels[axis] = level
            stated.add(axis)
    for axis, level in (expect or {}).items():
        levels[axis] = level
        stated.add(axis)
    if strict:
        levels = dict.fromkeys(AXIS_NAMES, "bitwise")
    return Claims(levels, frozenset(stated), strict)
