"""Group rows and decide verdicts: bitwise equal / differs (with numbers and why) / missing.

For each request and each axis (repeat, gpu, mode, batch, run) rows that agree on every other axis
are grouped; a group is equal when every row has the same output and LSE digests. Reads Arrow only.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .audit import audit_kernels
from .diffstats import DiffStats, diff_stats
from .errors import EXIT_MISMATCH, EXIT_OK
from .matrix import expected_keys
from .spec import spec_from_dict
from .store import RunStore

AXES: Dict[str, str] = {"repeat": "repeat", "gpu": "slot", "mode": "mode", "batch": "case", "run": "run_id"}
ENV_FIELDS = ("gpu_name", "sm_count", "driver", "cuda", "torch", "flashinfer")


@dataclass
class Mismatch:
    axis: str
    request: str
    a: str  # run_id:key
    b: str
    out: Optional[DiffStats]
    lse: Optional[DiffStats]
    why: List[str]


@dataclass
class AxisVerdict:
    request: str
    axis: str
    status: str  # equal | differs | n/a
    groups: int = 0
    rows: int = 0
    differing_groups: int = 0


@dataclass
class Comparison:
    runs: List[str]
    rows: int = 0
    verdicts: List[AxisVerdict] = field(default_factory=list)
    mismatches: List[Mismatch] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    duplicates: List[str] = field(default_factory=list)
    not_run: List[Tuple[str, str, str]] = field(default_factory=list)  # (id, status, reason)
    errors: List[Tuple[str, str]] = field(default_factory=list)
    incomplete_runs: List[str] = field(default_factory=list)
    audit: List[str] = field(default_factory=list)  # rows whose kernels contradict their path

    @property
    def failed(self) -> bool:
        return bool(
            any(v.status == "differs" for v in self.verdicts)
            or self.missing or self.duplicates or self.errors or self.audit
        )

    @property
    def exit_code(self) -> int:
        return EXIT_MISMATCH if self.failed else EXIT_OK


def explain(a: dict, b: dict) -> List[str]:
    """What differs between the two rows' recorded plans, paths and environments."""
    why = []
    for name in ("backend", "attn", "path"):
        if a[name] != b[name]:
            why.append(f"{name}: {a[name]} vs {b[name]}")
    pa, pb = json.loads(a["plan"] or "{}"), json.loads(b["plan"] or "{}")
    for k in sorted(set(pa) | set(pb)):
        if pa.get(k) != pb.get(k):
            why.append(f"plan.{k}: {pa.get(k)} vs {pb.get(k)}")
    for name in ENV_FIELDS:
        if a[name] != b[name]:
            why.append(f"{name}: {a[name]} vs {b[name]}")
    return why or ["unexplained: same plan, path and environment"]


class _Blobs:
    def __init__(self, store: RunStore, runs: Sequence[str]):
        self.store, self.runs = store, list(runs)

    def stats(self, a: dict, b: dict, which: str) -> Optional[DiffStats]:
        da, db = a[f"{which}_digest"], b[f"{which}_digest"]
        if da == db:
            return None
        raw_a, raw_b = self.store.read_blob(self.runs, da), self.store.read_blob(self.runs, db)
        if raw_a is None or raw_b is None or a[f"{which}_shape"] != b[f"{which}_shape"]:
            return None
        return diff_stats(raw_a, raw_b, a[f"{which}_dtype"], a[f"{which}_shape"])


def _check_cells(store: RunStore, runs: Sequence[str], rows: List[dict], result: Comparison) -> None:
    seen: Dict[Tuple[str, str], int] = defaultdict(int)
    for r in rows:
        seen[(r["run_id"], r["key"])] += 1
    for run_id in runs:
        manifest = store.manifest(run_id)
        if manifest.get("status") != "complete":
            result.incomplete_runs.append(f"{run_id} ({manifest.get('status')})")
        spec = spec_from_dict(manifest["spec"], f"{run_id}/manifest.json")
        for key in expected_keys(spec, int(manifest["gpus"])):
            count = seen.get((run_id, key), 0)
            if count == 0:
                result.missing.append(f"{run_id}:{key}")
            elif count > 1:
                result.duplicates.append(f"{run_id}:{key} x{count}")


def compare_runs(store: RunStore, runs: Sequence[str], max_details: int = 3) -> Comparison:
    result = Comparison(list(runs))
    rows = store.read_rows(runs).to_pylist()
    result.rows = len(rows)
    _check_cells(store, runs, rows, result)
    ok = []
    for r in rows:
        ident = f"{r['run_id']}:{r['key']}"
        if r["status"] == "ok":
            ok.append(r)
            problem = audit_kernels(r["path"], r["kernels"])
            if problem:
                result.audit.append(f"{ident}: {problem}")
        elif r["status"] == "error":
            result.errors.append((ident, r["reason"]))
        else:
            result.not_run.append((ident, r["status"], r["reason"]))
    order = {run: i for i, run in enumerate(runs)}
    ok.sort(key=lambda r: (order[r["run_id"]], r["slot"], r["case"], r["mode"], r["repeat"]))
    blobs = _Blobs(store, runs)
    by_request: Dict[str, List[dict]] = defaultdict(list)
    for r in ok:
        by_request[r["request"]].append(r)
    for request in sorted(by_request):
        for axis, col in AXES.items():
            others = [c for c in AXES.values() if c != col]
            groups: Dict[tuple, List[dict]] = defaultdict(list)
            for r in by_request[request]:
                groups[tuple(r[c] for c in others)].append(r)
            verdict = AxisVerdict(request, axis, "n/a")
            details = 0
            for members in groups.values():
                if len({r[col] for r in members}) < 2:
                    continue
                verdict.groups += 1
                verdict.rows += len(members)
                anchor, seen = members[0], {(members[0]["out_digest"], members[0]["lse_digest"])}
                differs = False
                for r in members[1:]:
                    ident = (r["out_digest"], r["lse_digest"])
                    if ident in seen:
                        continue
                    seen.add(ident)
                    differs = True
                    if details < max_details:
                        details += 1
                        result.mismatches.append(Mismatch(
                            axis, request, f"{anchor['run_id']}:{anchor['key']}", f"{r['run_id']}:{r['key']}",
                            blobs.stats(anchor, r, "out"), blobs.stats(anchor, r, "lse"), explain(anchor, r)))
                verdict.differing_groups += differs
            if verdict.groups:
                verdict.status = "differs" if verdict.differing_groups else "equal"
            result.verdicts.append(verdict)
    return result
