"""Golden baselines, one per (spec name, environment fingerprint), each pointing at a run id.

Stored as <runs_root>/baselines/<spec name>/<fingerprint>.json. A run is compared bitwise against
the baseline of its own fingerprint; where none matches, against the nearest one, with the fields
that differ named (so a changed flashinfer version is a stated reason, not a silent verdict). What was
compared with what is a BaselineContext, judged with the comparison (findings.judge); verdict_of is what
compare, submit and report ask.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import DetrunError
from ..record.fingerprint import FINGERPRINT_FIELDS, field_differences, fingerprint_fields
from ..record.status import RunStatus
from ..spec.model import ROW_NEUTRAL, as_validated
from ..store.runs import RunReader, RunStore
from .claims import Checks
from .columnar import Columns, combine, densify, read_columns
from .compare import Comparison, compare_columns, compare_runs
from .findings import judge
from .requests import BaselineRequest
from .verdict import BaselineContext, Verdict

_DIR = "baselines"


def run_fingerprints(store: RunReader, run_ids: Sequence[str]) -> Dict[str, Dict[str, object]]:
    """fingerprint -> its fields, for every fingerprint recorded in these runs' rows."""
    table = store.dataset(run_ids).to_table(columns=["fingerprint", *FINGERPRINT_FIELDS])
    out: Dict[str, Dict[str, object]] = {}
    for row in table.to_pylist():
        if row["fingerprint"]:
            out.setdefault(row["fingerprint"], fingerprint_fields(row))
    return out


def _spec_name(store: RunStore, run_id: str) -> str:
    return store.manifest(run_id)["spec"]["name"]


def set_baseline(store: RunStore, run_id: str, force: bool = False) -> List[dict]:
    """Make run_id the baseline of each fingerprint it recorded. It must be complete and pass on its own."""
    manifest = store.manifest(run_id)
    if not force:
        if manifest.get("status") != RunStatus.COMPLETE:
            raise DetrunError(
                f"run {run_id} is {manifest.get('status')}, not complete; a baseline must be (or --force)")
        if judge(compare_runs(store, [run_id])).failed:
            raise DetrunError(f"run {run_id} is not reproducible on its own; a baseline must pass (or --force)")
    fingerprints = run_fingerprints(store, [run_id])
    if not fingerprints:
        raise DetrunError(f"run {run_id} has no rows with a fingerprint")
    name, now = manifest["spec"]["name"], datetime.now(timezone.utc).isoformat()
    docs = []
    for fp, fields in sorted(fingerprints.items()):
        doc = {"fingerprint": fp, "fields": fields, "run_id": run_id, "spec": name, "set": now}
        store.write_json(posixpath.join(_DIR, name, f"{fp}.json"), doc)
        docs.append(doc)
    return docs


def list_baselines(store: RunStore, spec: Optional[str] = None) -> List[dict]:
    specs = [spec] if spec else store.list_names(_DIR, "", dirs=True)
    docs = []
    for name in specs:
        for fname in store.list_names(posixpath.join(_DIR, name), ".json"):
            doc = store.read_json(posixpath.join(_DIR, name, fname), "baseline")
            if doc is not None:  # removed since it was listed
                docs.append(doc)
    return docs


@dataclass
class BaselineMatch:
    fingerprint: str
    baseline: Optional[dict]  # the baseline document compared against (None: no baseline for the spec)
    differing: List[Tuple[str, object, object]]  # fingerprint fields that differ (empty: exact match)

    def provisional(self) -> str:
        """The line that says a verdict against a nearest-fingerprint baseline is provisional ("" if exact)."""
        if self.baseline is None or not self.differing:
            return ""
        fields = ", ".join(f"{k} ({base} vs {mine})" for k, mine, base in self.differing)
        return (f"provisional: no baseline for fingerprint {self.fingerprint}; nearest "
                f"({self.baseline['run_id']}) differs in {fields}")

    def describe(self) -> str:
        if self.baseline is None:
            return f"fingerprint {self.fingerprint}: no baseline set for this spec; compared within the run only"
        run = self.baseline["run_id"]
        if not self.differing:
            return f"fingerprint {self.fingerprint}: bitwise against baseline {run} (same fingerprint)"
        fields = "; ".join(f"{k}: {base} vs {mine}" for k, mine, base in self.differing)
        return (f"fingerprint {self.fingerprint}: no baseline with this fingerprint; nearest baseline {run} "
                f"(fingerprint {self.baseline['fingerprint']}) differs in {fields} "
                f"(baseline vs this run): differences across runs are explained by environment, not failures")


def match_baseline(fp: str, fields: Dict[str, object], baselines: Sequence[dict]) -> BaselineMatch:
    """The baseline with this fingerprint, else the one differing in the fewest fields."""
    if not baselines:
        return BaselineMatch(fp, None, [])
    best = min(baselines, key=lambda d: (d["fingerprint"] != fp, len(field_differences(fields, d["fields"]))))
    return BaselineMatch(fp, best, [] if best["fingerprint"] == fp else field_differences(fields, best["fields"]))


def _same_spec(store: RunStore, run_id: str, base_id: str) -> None:
    """The run and its baseline ran the same spec (claims, limits and isolation aside: they change no row)."""
    a, b = (as_validated(store.manifest(r)["spec"]) for r in (run_id, base_id))
    fields = sorted(k for k in (set(a) | set(b)) - set(ROW_NEUTRAL) if a.get(k) != b.get(k))
    if fields:
        raise DetrunError(f"run {run_id} ran a different spec than its baseline {base_id} "
                          f"(differs in: {', '.join(fields)}); set a new baseline for it")


_RAN = (("backend", "backend"), ("attention kernel family", "attn"), ("wrapper path", "path"))


def backend_changes(cols: Columns, base_runs: Sequence[str], run_id: str) -> List[str]:
    """Cells (case, request, mode, phase) whose rows ran another backend, kernel family or wrapper path than the
    baseline's: one line per change, e.g. "backend changed against baseline B: flashinfer -> reference"."""
    ok = cols.ok_rows()
    if not len(ok):
        return []
    side = np.isin(cols.codes("run_id")[ok], [cols.code_of("run_id", r) for r in base_runs])
    cell = densify(combine([cols.codes(c)[ok] for c in ("case", "request", "mode", "phase")])[0])
    ran = densify(combine([cols.codes(c)[ok] for c in ("backend", "attn", "path")])[0])
    seen: Dict[Tuple[int, bool], set] = {}
    first: Dict[int, int] = {}
    for c, s, r, i in zip(cell.tolist(), side.tolist(), ran.tolist(), ok.tolist()):
        seen.setdefault((c, s), set()).add(r)
        first.setdefault(r, i)
    rows = cols.rows_in_memory(np.array(sorted(first.values()), dtype=np.int64))
    desc = {r: rows[i] for r, i in first.items()}
    changes: Dict[Tuple[str, str, str], List[int]] = {}
    for (c, s), mine in seen.items():
        base = seen.get((c, True))
        if s or base is None or base == mine:
            continue
        b, m = desc[min(base)], desc[min(mine)]
        name, column = next(((n, col) for n, col in _RAN if b[col] != m[col]), _RAN[-1])
        changes.setdefault((name, b[column], m[column]), []).append(c)
    return [f"{name} changed against baseline {', '.join(base_runs)}: {old} -> {new} ({len(cells)} cells)"
            for (name, old, new), cells in sorted(changes.items())]


def compare_with_baseline(store: RunStore, run_id: str,
                          checks: Checks = Checks()) -> Tuple[Comparison, BaselineContext]:
    """Compare run_id with the baseline(s) of its fingerprint(s); the context says what met what, a
    nearest-fingerprint baseline is provisional, and a changed backend, kernel family or path fails."""
    name = _spec_name(store, run_id)
    baselines = list_baselines(store, name)
    matches = [match_baseline(fp, fields, baselines) for fp, fields in run_fingerprints(store, [run_id]).items()]
    base_runs = sorted({m.baseline["run_id"] for m in matches if m.baseline} - {run_id})
    for base in base_runs:
        _same_spec(store, run_id, base)
    cols = read_columns(store, [*base_runs, run_id])
    cmp = compare_columns(cols, checks.details, checks.strict, dict(checks.expect))
    context = BaselineContext(
        base_runs[0] if base_runs else None, tuple(m.describe() for m in matches),
        tuple(line for line in (m.provisional() for m in matches) if line),
        "" if baselines else f"no baseline set for spec {name}: compared within the run only",
        checks.require_baseline, tuple(backend_changes(cols, base_runs, run_id)) if base_runs else ())
    return cmp, context


def comparison(store: RunReader, runs: Sequence[str], checks: Checks = Checks()) -> Tuple[Comparison, BaselineContext]:
    """What compare, submit and report check: the runs among themselves (an empty baseline context), or one
    run against its baseline."""
    if not checks.baseline:
        if checks.require_baseline:
            raise DetrunError("--require-baseline goes with --baseline")
        return compare_runs(store, runs, checks.details, checks.strict, dict(checks.expect)), BaselineContext()
    if len(runs) != 1:
        raise DetrunError(f"--baseline compares one run against its baseline, got {len(runs)} runs")
    return compare_with_baseline(store.runs_root("--baseline"), runs[0], checks)


def verdict_of(store: RunReader, runs: Sequence[str], checks: Checks = Checks()) -> Verdict:
    """The runs compared (comparison) and judged once: the Verdict every presenter reads."""
    return judge(*comparison(store, runs, checks))


def baseline_set(req: BaselineRequest) -> List[dict]:
    """detrun baseline set: req.run made the baseline of each fingerprint it recorded (the documents written)."""
    if req.run is None:
        raise DetrunError("baseline set: which run? (detrun baseline set RUN)")
    return set_baseline(RunStore(req.runs_root), req.run, req.force)


def baseline_show(req: BaselineRequest) -> List[dict]:
    """detrun baseline show: every baseline document under req.runs_root."""
    return list_baselines(RunStore(req.runs_root))
