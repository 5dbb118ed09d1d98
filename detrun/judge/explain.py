"""Why two rows differ: the plan fields, path, backend and environment that tell them apart (explain), and
which of them explains a difference along an axis (cause, label; compare.py's module docstring says what
explains nothing along backend and version). PairWords works each out once per pair of row signatures."""

from __future__ import annotations

import json
from functools import lru_cache
from types import MappingProxyType
from typing import Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

from ..record.fingerprint import FINGERPRINT_FIELDS, field_differences
from ..record.plans import PLAN_UNKNOWN

PLAN_EXPLAINS_NOT = ("backend",)  # axes along which no plan field explains a difference (compare.py)
ENV_EXPLAINS_NOT = {"version": ("torch", "flashinfer", "sglang")}  # axis -> environment fields that do not
ENV_FIELDS = FINGERPRINT_FIELDS
PLAN_COLUMNS = ("backend", "attn", "path")

MODEL, SGLANG = "flashinfer", "sglang"  # detrun's model of SGLang, and SGLang's own backend
SGLANG_ONLY = "sglang."  # plan keys only SGLang's rows record (sglang.use_ragged)


def model_pair(a: dict, b: dict) -> bool:
    """A row of detrun's model beside a row of SGLang's own backend: their backend names, SGLang's own plan keys
    and the SGLang version explain nothing between them (the model claims to be that SGLang)."""
    return {a["backend"], b["backend"]} == {MODEL, SGLANG}


@lru_cache(maxsize=4096)
def plan_fields(plan: str) -> Mapping[str, object]:
    """A row's plan JSON as a read-only mapping, parsed once per distinct string (a compare meets a few plans
    in thousands of rows)."""
    return MappingProxyType(json.loads(plan or "{}"))


def plan_differences(a: dict, b: dict) -> List[Tuple[str, object, object]]:
    """(field, a, b) for each recorded plan field that differs: backend, attn, path, then the plan JSON."""
    pair = model_pair(a, b)
    names = [n for n in PLAN_COLUMNS if not (pair and n == "backend")]
    diffs = [(name, a[name], b[name]) for name in names if a[name] != b[name]]
    pa, pb = plan_fields(a["plan"]), plan_fields(b["plan"])
    keys = sorted(k for k in set(pa) | set(pb) if not (pair and k.startswith(SGLANG_ONLY)))
    diffs += [(k, pa.get(k), pb.get(k)) for k in keys if pa.get(k) != pb.get(k)]
    return diffs


def env_differences(a: dict, b: dict) -> List[Tuple[str, object, object]]:
    """field_differences, less the SGLang version between a model row and an SGLang row."""
    pair = model_pair(a, b)
    return [d for d in field_differences(a, b) if not (pair and d[0] == "sglang")]


def explain(a: dict, b: dict) -> List[str]:
    """What differs between the two rows' recorded plans, paths and environments."""
    plan = [(k if k in PLAN_COLUMNS else f"plan.{k}", x, y) for k, x, y in plan_differences(a, b)]
    why = [f"{k}: {x} vs {y}" for k, x, y in plan + env_differences(a, b)]
    if why:
        return why
    unknown = unknown_plan(a)
    return [f"unexplained: same path and environment, plans unknown ({unknown})" if unknown
            else "unexplained: same plan, path and environment"]


def cause(a: dict, b: dict, axis: str = "") -> Optional[Tuple[str, str, str]]:
    """(plan | environment, field, "a vs b") of the first differing plan field, else environment field, of those
    that explain a difference along axis (PLAN_EXPLAINS_NOT, ENV_EXPLAINS_NOT)."""
    plan = [] if axis in PLAN_EXPLAINS_NOT else plan_differences(a, b)
    env = [d for d in env_differences(a, b) if d[0] not in ENV_EXPLAINS_NOT.get(axis, ())]
    for kind, diffs in (("plan", plan), ("environment", env)):
        if diffs:
            name, x, y = diffs[0]
            return kind, name, f"{x} vs {y}"
    return None


def model_differs(a: dict, b: dict) -> str:
    """Why a model row and an SGLang row that differ are a finding ("" when they are not such a pair, or their
    plans differ in a field other than the path): the same path and plan, or another path for one cell."""
    if not model_pair(a, b):
        return ""
    version = a["sglang"] or b["sglang"]
    diffs = plan_differences(a, b)
    if not diffs:
        return f"model differs from SGLang {version}: same path and plan"
    if diffs[0][0] == "path":
        model, own = (a, b) if a["backend"] == MODEL else (b, a)
        return f"model differs from SGLang {version}: the model took path {model['path']}, SGLang ran {own['path']}"
    return ""


def unknown_plan(r: dict) -> str:
    """Why the row's plan (or its prefix wrapper's) could not be read; "" when it was."""
    plan = plan_fields(r["plan"])
    return "; ".join(str(v) for k, v in plan.items() if k.rpartition(".")[2] == PLAN_UNKNOWN)


def label(a: dict, b: dict, axis: str = "") -> str:
    """Why two rows may differ along axis: the first differing plan field, else environment field, that explains
    there (cause), else unexplained. A plan detrun could not read explains nothing, and cannot be taken as equal
    either. A model row and an SGLang row on the same path and plan (or on different paths) are never explained
    (model_differs)."""
    unknown = unknown_plan(a) or unknown_plan(b)
    if unknown:
        return f"unexplained (plan unknown: {unknown})"
    model = model_differs(a, b)
    if model:
        return f"unexplained: {model}"
    found = cause(a, b, axis)
    if found:
        return f"explained by {found[0]}: {found[1]}"
    silent = cause(a, b)
    return f"unexplained: {silent[1]} explains nothing across {axis}" if silent else "unexplained"


def signature(r: dict) -> tuple:
    return tuple(r[c] for c in PLAN_COLUMNS + ("plan",) + ENV_FIELDS)


def _either_unknown(a: dict, b: dict) -> bool:
    return bool(unknown_plan(a) or unknown_plan(b))


class PairWords:
    """explain, label and cause of two rows, worked out once per distinct pair of signatures (each a function of
    the rows' plan columns, plan and environment alone): a compare meets a few plans in thousands of groups."""

    def __init__(self, codes: Optional[Sequence[int]] = None) -> None:
        """codes: each row's signature as a code, by the row's read-order index (`index`: the compare's rows have
        one; compare_columns makes the codes from the columns); a row without one has its signature tuple."""
        self.memo: Dict[tuple, object] = {}
        self.codes = codes
        self.signatures: Dict[int, tuple] = {}  # id of a row (alive for the whole compare) -> its signature

    def signature(self, r: dict) -> Hashable:
        at = getattr(r, "index", None)
        if self.codes is not None and at is not None:
            return self.codes[at]
        sig = self.signatures.get(id(r))
        if sig is None:
            sig = self.signatures[id(r)] = signature(r)
        return sig

    def _once(self, fn, a: dict, b: dict, *args):
        key = (fn, self.signature(a), self.signature(b), args)
        if key not in self.memo:
            self.memo[key] = fn(a, b, *args)
        return self.memo[key]

    def explain(self, a: dict, b: dict) -> List[str]:
        return self._once(explain, a, b)

    def label(self, a: dict, b: dict, axis: str) -> str:
        return self._once(label, a, b, axis)

    def cause(self, a: dict, b: dict, axis: str) -> Optional[Tuple[str, str, str]]:
        return self._once(cause, a, b, axis)

    def either_unknown(self, a: dict, b: dict) -> bool:
        return self._once(_either_unknown, a, b)
