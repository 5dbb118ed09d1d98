"""Group rows and decide verdicts: equal / differs / explained by plan / missing.

For each request and each axis (repeat, gpu, mode, batch, phase, run, backend, version) rows that agree on every
other axis are grouped. Rows of a group with the same recorded plan, path and environment must carry the same
output and LSE digests ("differs", a failure); a difference between rows whose plans differ is
"explained", and an equality between them is noted. Along the phase axis a prefill row and a decode row
are compared on their last query token (last_out_digest, last_lse_digest).

backend and version are cross-run axes (a job has one backend, and runs once per `versions:` environment): their
groups span runs (they do not agree on run_id), and of each backend (version) value a group holds the rows of one
run, the first in compare order. Every other axis, run included, groups only rows of one backend and version.
What varies by construction along them explains nothing there (else the axis could never fail):
- backend: the backend itself (backend, attn, path, plan) explains nothing; an environment field may (the runs
  ran on another GPU, driver, CUDA, torch);
- version: the versioned packages (fingerprint fields torch, flashinfer, sglang) explain nothing; a plan field
  that changed with the version (e.g. cta_tile_q, the path) or another GPU, driver or CUDA may.
Whether a difference fails is decided by the claims (claims.py) in findings.judge, which turns this Comparison
into the Verdict; nothing here judges. Reads Arrow only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..envflags import USE_PAGED_FLAG, use_paged_of
from ..errors import DetrunError
from ..record.fingerprint import fingerprint_fields
from ..record.keys import key_parts, row_key
from ..record.plans import PLAN_UNKNOWN
from ..record.status import Status, run_complete
from ..spec.matrix import expected_key_array, key_layout, profiled_by
from ..spec.model import JobSpec, spec_from_dict
from ..spec.sglang import profile_label
from ..store.runs import RunReader
from .blobs import Blobs, ident
from .claims import CROSS_RUN, Claims, claims_of
from .columnar import Columns, combine, densify, mixed_radix, read_columns
from .diffstats import DiffStats
from .explain import ENV_FIELDS, MODEL, PLAN_COLUMNS, SGLANG, PairWords, unknown_plan
from .tolerance import Measured, Numbers, further
from .wiring import wiring_problems

AXES: Dict[str, str] = {"repeat": "repeat", "gpu": "slot", "mode": "mode", "batch": "case", "phase": "phase",
                        "run": "run_id", "backend": "backend", "version": "version"}
LAST = "phase"  # the axis compared on the last query token's digests


@dataclass
class Mismatch:
    axis: str
    request: str
    a: str  # run_id:key
    b: str
    out: Optional[DiffStats]
    lse: Optional[DiffStats]
    why: List[str]
    label: str = "unexplained"  # or "unexplained (plan unknown: ...)" / "explained by plan: <field>" / ...
    no_numbers: List[str] = field(default_factory=list)  # "out: no numbers: blob D missing under R/blobs"
    reference: List[str] = field(default_factory=list)  # which row is further from the reference (tolerance.further)

    @property
    def explained(self) -> bool:
        return not self.label.startswith("unexplained")


@dataclass(frozen=True)
class AxisVerdict:
    request: str
    axis: str
    status: str  # equal | explained | differs | n/a
    groups: int = 0
    rows: int = 0
    differing_groups: int = 0  # groups with an unexplained difference
    explained_groups: int = 0  # groups whose only differences are explained by plan or environment
    causes: Mapping[str, str] = field(default_factory=dict)  # explaining field -> first example ("512 vs 8192")
    measured: Optional[Measured] = None  # under a bound claim: its differing pairs' numbers (tolerance.py)


@dataclass
class Comparison:
    """What compare found in the rows, before any judging (findings.judge makes the Verdict of it)."""

    runs: List[str]
    rows: int = 0
    verdicts: List[AxisVerdict] = field(default_factory=list)
    mismatches: List[Mismatch] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    duplicates: List[str] = field(default_factory=list)
    not_run: List[Tuple[str, str, str]] = field(default_factory=list)  # (id, status, reason)
    unreproduced: List[Tuple[str, str]] = field(default_factory=list)  # ok rows of a known bug that ran fine
    errors: List[Tuple[str, str]] = field(default_factory=list)
    incomplete_runs: List[str] = field(default_factory=list)
    audit: List[str] = field(default_factory=list)  # rows whose kernels contradict their path
    wiring: List[str] = field(default_factory=list)  # backend sglang rows whose wiring fails (judge/wiring.py)
    notes: List[str] = field(default_factory=list)  # equal although plans differ
    claims: Claims = field(default_factory=lambda: claims_of([]))
    backends: List[str] = field(default_factory=list)  # "backend attn" of the rows that ran
    audit_groups: int = 0  # (run, path, plan) of flashinfer rows
    unaudited: List[Tuple[str, str]] = field(default_factory=list)  # (group, why) with no kernels recorded
    plan_unknown: List[Tuple[str, str]] = field(default_factory=list)  # (run:key, why) of rows whose plan was not read
    profiles: List[str] = field(default_factory=list)  # the runs' SGLang profiles (spec/sglang.py)
    uncompared: Dict[str, str] = field(default_factory=dict)  # claimed axis with no group -> why nothing met
    environment: Dict[str, Dict[str, object]] = field(default_factory=dict)  # fingerprint -> its fields (all rows)


def _lookup(values: List, table: Dict, codes: np.ndarray) -> np.ndarray:
    """table[values[code]] per code, -1 where absent (int32 where the table's values fit)."""
    found = [table.get(v, -1) for v in values] or [-1]
    dtype = np.int32 if len(table) < 1 << 31 else np.int64
    return np.array(found, dtype=dtype)[codes]


def _positions(cols: Columns, run_id: str, cells: list, blocks: list, expected) -> np.ndarray:
    """Each row's place in the run's expected keys (blocks x cells), found from its case, request,
    mode, phase, slot and repeat and checked against its key one file at a time; a row whose key is
    elsewhere (or nowhere) is looked up by key in expected() (built only then)."""
    (lo, hi), modes, requests = cols.row_range(run_id), cols.dictionary("mode"), cols.dictionary("request")
    phases = cols.dictionary("phase")
    at = {c: cols.codes(c)[lo:hi] for c in ("case", "request", "mode", "phase", "slot", "repeat")}
    combos = [(c, r, m, p) for c in cols.dictionary("case") for r in requests for m in modes for p in phases]
    code = mixed_radix([at[c] for c in ("case", "request", "mode", "phase")],
                       [len(cols.dictionary("case")), len(requests), len(modes), len(phases)])
    cell = _lookup(combos, {c: i for i, c in enumerate(cells)}, code)
    del code
    reps = int(at["repeat"].max()) + 1 if hi > lo else 1
    slots = int(at["slot"].max()) + 1 if hi > lo else 1
    slot = np.maximum(at["slot"], 0)
    grid = _lookup([(s, r) for s in range(slots) for r in range(reps)], {b: i for i, b in enumerate(blocks)},
                   mixed_radix([slot, np.maximum(at["repeat"], 0)], [slots, reps]))
    del slot
    pos = mixed_radix([grid, cell], [len(blocks), len(cells)])
    pos[(cell < 0) | (grid < 0)] = -1
    heads, tails = key_parts(cells, blocks)
    keys = cols.keys(run_id)
    bounds = np.cumsum([0] + [len(chunk) for chunk in keys.chunks])

    def check(k: int) -> None:  # Arrow and numpy let go of the GIL: chunks are checked in parallel
        part = slice(int(bounds[k]), int(bounds[k + 1]))
        want = pc.binary_join_element_wise(heads.take(pa.array(np.maximum(cell[part], 0))),
                                           tails.take(pa.array(np.maximum(grid[part], 0))), "")
        pos[part][~pc.equal(keys.chunk(k), want).to_numpy(zero_copy_only=False)] = -1

    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        list(pool.map(check, range(keys.num_chunks)))
    rest = np.flatnonzero(pos < 0)
    if len(rest):
        found = pc.index_in(keys.take(pa.array(rest)), value_set=expected()).to_numpy(zero_copy_only=False)
        pos[rest] = np.where(np.isnan(found.astype(float)), -1, found).astype(np.int64)
    return pos


def _check_cells(cols: Columns, result: Comparison) -> None:
    """Missing and duplicate cells per run, in the order of its expected keys (counted as arrays)."""
    for run_id in cols.runs:
        manifest = cols.manifests[run_id]
        if not run_complete(manifest):
            result.incomplete_runs.append(f"{run_id} ({manifest.get('status')})")
        spec, gpus = spec_from_dict(manifest["spec"], f"{run_id}/manifest.json"), int(manifest["gpus"])
        cells, blocks = key_layout(spec, gpus)
        at = _positions(cols, run_id, cells, blocks, lambda spec=spec, gpus=gpus: expected_key_array(spec, gpus))
        count = np.bincount(at[at >= 0], minlength=len(cells) * len(blocks))
        for i in np.flatnonzero(count != 1).tolist():
            (case, request, mode, phase), (slot, repeat) = cells[i % len(cells)], blocks[i // len(cells)]
            key = row_key(case, request, mode, repeat, slot, phase)
            if count[i] == 0:
                result.missing.append(f"{run_id}:{key}")
            else:
                result.duplicates.append(f"{run_id}:{key} x{count[i]}")


def _name(r: dict) -> str:
    return f"{r['run_id']}:{r['key']}"


class _GroupJudge:
    """Judges the groups of one request along one axis; records up to max_details mismatches. Under a bound
    claim it measures every pair of distinct results of each group besides (measured)."""

    def __init__(self, result: Comparison, request: str, axis: str, blobs: Blobs, words: PairWords,
                 max_details: int):
        self.result, self.blobs, self.words = result, blobs, words
        self.axis, self.request = axis, request
        self.causes: Dict[str, str] = {}  # explaining field -> first example ("512 vs 8192")
        self.left = max_details
        self.last = self.axis == LAST
        self.noted = axis not in (LAST, "backend")  # there plans always differ: equal bits are the claim, no note
        bound = result.claims.bound(axis)
        self.measured: Optional[Measured] = None if bound is None else Measured(bound)

    def _record(self, a: dict, b: dict, why: List[str], tag: str) -> None:
        if self.left <= 0:
            return
        self.left -= 1
        out, lse = (self.blobs.stats(a, b, which, self.last) for which in ("out", "lse"))
        self.result.mismatches.append(Mismatch(
            self.axis, self.request, _name(a), _name(b),
            out if isinstance(out, DiffStats) else None, lse if isinstance(lse, DiffStats) else None, why, tag,
            [f"{which}: {text}" for which, text in (("out", out), ("lse", lse)) if isinstance(text, str)],
            further(a, b)))

    def _measure(self, members: List[dict]) -> None:
        """Each two distinct results of the group, their outputs measured against the bound."""
        distinct: Dict[Tuple[str, str], dict] = {}
        for r in members:
            distinct.setdefault(ident(r, self.last), r)
        reps, measured = list(distinct.values()), self.measured
        assert measured is not None
        for i, a in enumerate(reps):
            for b in reps[i + 1:]:
                measured = measured.add(f"{_name(a)} vs {_name(b)}", self.blobs.stats(a, b, "out", self.last),
                                        partial(self._beside, a, b))
        self.measured = measured

    def _beside(self, a: dict, b: dict) -> Tuple[Numbers, List[str]]:
        """A pair's LSE numbers and the reference's word on it (shown beside its output's)."""
        return self.blobs.stats(a, b, "lse", self.last), further(a, b)

    def __call__(self, members: List[dict]) -> Tuple[bool, bool]:
        """(an unexplained difference, an explained difference) in this group."""
        if self.measured is not None:
            self._measure(members)
        by_plan: Dict[Hashable, List[dict]] = defaultdict(list)
        words = self.words
        for r in members:
            by_plan[words.signature(r)].append(r)
        unexplained = explained = False
        for same in by_plan.values():  # same plan, path and environment: must be bitwise equal
            seen = {ident(same[0], self.last)}
            for r in same[1:]:
                if ident(r, self.last) not in seen:
                    seen.add(ident(r, self.last))
                    unexplained = True
                    self._record(same[0], r, words.explain(same[0], r), words.label(same[0], r, self.axis))
        reps = [same[0] for same in by_plan.values()]
        for r in reps[1:]:  # plans differ: a difference is explained (unless a plan is unknown), an equality noted
            if ident(r, self.last) != ident(reps[0], self.last):
                tag = words.label(reps[0], r, self.axis)
                if tag.startswith("unexplained"):
                    unexplained = True
                else:
                    explained = True
                    found = words.cause(reps[0], r, self.axis)
                    if found is not None:  # explained: a plan or environment field differs
                        self.causes.setdefault(found[1], found[2])
                self._record(reps[0], r, words.explain(reps[0], r), tag)
            # along phase the plans always differ (prefill's path, planner and kernel are never decode's), and along
            # backend: equal bits there are what the axis claims, not worth a note; an unknown plan is its own finding
            elif self.noted and not words.either_unknown(reps[0], r):
                self.result.notes.append(
                    f"equal across {self.axis} although plans differ: {self.request} "
                    f"{reps[0]['run_id']}:{reps[0]['key']} vs {r['run_id']}:{r['key']} "
                    f"({'; '.join(words.explain(reps[0], r))})")
        return unexplained, explained


def _in_order(cols: Columns, idx: np.ndarray) -> List[int]:
    """The read indices idx in compare order: run (as given), slot, case, prefill first, mode, repeat, then index;
    sorted on the columns' codes (strings by their rank among the dictionary's values)."""
    def ranked(column: str, rank: Callable[[List[str]], Dict[str, int]]) -> np.ndarray:
        names = cols.dictionary(column)
        of = rank(names)
        return np.array([of[v] for v in names] or [0], dtype=np.int64)[cols.codes(column)[idx]]

    def by_value(names: List[str]) -> Dict[str, int]:
        return {v: k for k, v in enumerate(sorted(names))}

    runs = {run: i for i, run in enumerate(cols.runs)}
    keys = (idx, cols.codes("repeat")[idx], ranked("mode", by_value),
            ranked("phase", lambda names: {v: int(v != "prefill") for v in names}), ranked("case", by_value),
            cols.codes("slot")[idx], ranked("run_id", lambda names: {v: runs.get(v, len(runs)) for v in names}))
    return idx[np.lexsort(keys)].tolist()


def _statuses(cols: Columns, result: Comparison) -> np.ndarray:
    """Audit, error and not-run lists in read order; returns the read indices of the ok rows."""
    ok = cols.ok_rows()
    others = np.flatnonzero(cols.codes("status") != cols.code_of("status", Status.OK))
    rows = cols.rows_at(others)
    audited = cols.rows_in_memory(np.asarray([i for i, _ in cols.audit], dtype=np.int64))
    for i, problem in cols.audit:
        result.audit.append(f"{audited[i]['run_id']}:{audited[i]['key']}: {problem}")
    for i in others.tolist():
        r = rows[i]
        if r["status"] == Status.ERROR:
            result.errors.append((f"{r['run_id']}:{r['key']}", r["reason"]))
        else:
            result.not_run.append((f"{r['run_id']}:{r['key']}", r["status"], r["reason"]))
    if any(cols.dictionary("reason")):  # ok rows with a reason: known-bug cells that ran fine in an isolated worker
        said = ok[cols.codes("reason")[ok] != cols.code_of("reason", "")]
        for r in cols.rows_in_memory(said).values():
            result.unreproduced.append((f"{r['run_id']}:{r['key']}", r["reason"]))
    return ok


def _one(values: np.ndarray) -> bool:
    """Whether the codes are all one value (or none)."""
    return not len(values) or values.min() == values.max()


def _varies(group: np.ndarray, rep: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Per group: whether values are not all one (compared with one representative row each)."""
    if _one(values):  # one value overall: no group varies
        return np.zeros(size, dtype=bool)
    return np.bincount(group[values != values[rep][group]], minlength=size) > 0


def _axis_groups(ok: np.ndarray, group: np.ndarray, size: int, axis: np.ndarray, req: np.ndarray,
                 judged: np.ndarray, nreq: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request code (nreq of them): groups with two or more values of the axis, their rows; and the read
    indices of the rows of groups whose `judged` codes (plan, environment and digests) are not all one."""
    index = np.int32 if len(group) < 1 << 31 else np.int64
    rep = np.zeros(size, dtype=index)
    rep[group] = np.arange(len(group), dtype=index)  # any member of each group
    count = np.bincount(group, minlength=size)
    valid = _varies(group, rep, axis, size)
    judge = valid & _varies(group, rep, judged, size) if valid.any() else valid
    of = req[rep[valid]]
    groups = np.bincount(of, minlength=nreq)
    rows = np.bincount(of, weights=count[valid], minlength=nreq).astype(np.int64)
    return groups, rows, ok[judge[group]]


def _dropped(axis: str) -> Tuple[str, ...]:
    """The columns a group of axis need not agree on: the axis' own, and run_id along a cross-run axis."""
    return (AXES[axis], AXES["run"]) if axis in CROSS_RUN else (AXES[axis],)


def _groupings(req: np.ndarray, part: Dict[str, np.ndarray], axes: Sequence[str]):
    """axis -> (group code, bound) for these axes: rows agreeing on request and every other axis (_dropped) share
    a code. One mixed-radix code of all axes, the axis' digits taken out (else: combined per axis)."""
    n, bound = len(req), 4 * len(req) + 64
    cols = list(AXES.values())
    part = {c: part[c] - part[c].min() if n and part[c].min() else part[c] for c in cols}  # digits from 0
    radix = {c: int(part[c].max()) + 1 if n else 1 for c in cols}
    total = (int(req.max()) + 1 if n else 1) * int(np.prod([radix[c] for c in cols], dtype=object))
    if not n or total >= 1 << 62:
        for axis in axes:
            yield axis, combine([req] + [part[c] for c in cols if c not in _dropped(axis)], bound)
        return
    # int32 where total fits: half the memory traffic of the groupings
    full = mixed_radix([req] + [part[c] for c in cols], [int(req.max()) + 1] + [radix[c] for c in cols])
    weight = dict(zip(reversed(cols), np.cumprod([1] + [radix[c] for c in reversed(cols)]).tolist()))
    for axis in axes:
        group, size = full, total
        for col in sorted(_dropped(axis), key=weight.__getitem__, reverse=True):  # the lower digits keep their weight
            lower = weight[col]
            kept = group // (lower * radix[col])
            if lower > 1:
                kept *= lower
                kept += group % lower
            group, size = kept, size // radix[col]
        if size > bound:
            group = densify(group)
            size = int(group.max()) + 1
        yield axis, (group, size)


def _one_run_each(group: np.ndarray, values: np.ndarray, run: np.ndarray) -> Optional[np.ndarray]:
    """Along a cross-run axis: per group and value of the axis, the rows of the first run (rows are in compare
    order) that has them, as a mask; rows of one value in two runs are not compared there. None: all rows."""
    if _one(run) or _one(values):
        return None
    sub, _ = combine([group, values], 4 * len(group) + 64)
    first = np.zeros(int(sub.max()) + 1, dtype=run.dtype)
    first[sub[::-1]] = run[::-1]  # the last write wins: each sub's first row's run
    return run == first[sub]


_ONE = {"repeat": "repeat", "gpu": "GPU slot", "mode": "mode", "batch": "case", "phase": "phase", "run": "run",
        "backend": "backend", "version": "version"}


def _uncompared(cols: Columns, axes: Sequence[str]) -> Dict[str, str]:
    """Why no pair of rows met along each of these axes: the rows hold one value of it; no request has
    rows that differ only in it; or the rows that would have met did not run (counted by status)."""
    if not cols.n:
        return dict.fromkeys(axes, "no rows were stored")
    out, groupings = {}, None
    part = {c: cols.codes(c) for c in AXES.values()}
    for axis in axes:
        values = part[AXES[axis]]
        if _one(values):
            value = cols.rows_in_memory(np.array([0]))[0][AXES[axis]]
            value = {"repeat": f"r{value}", "gpu": f"g{value}", "version": value or "none (no versions:)"}.get(
                axis, value)
            out[axis] = f"all rows have one {_ONE[axis]}: {value}"
            continue
        groupings = groupings or dict(_groupings(cols.codes("request"), part, axes))
        group, size = groupings[axis]
        rep = np.zeros(size, dtype=np.int64)
        rep[group] = np.arange(len(group))
        inside = _varies(group, rep, values, size)[group]  # rows of groups with two values of the axis
        status, names = cols.codes("status")[inside], cols.dictionary("status")
        counts = np.bincount(status[status != cols.code_of("status", Status.OK)], minlength=len(names))
        said = [f"{n} {names[i].replace('_', ' ')}" for i, n in enumerate(counts.tolist()) if n]
        across = [a for a in CROSS_RUN if axis == "run" and not _one(part[AXES[a]])]  # never folded into run
        out[axis] = (f"the rows that would meet did not run ({', '.join(said)})" if said
                     else f"no request has two rows that differ only in {_ONE[axis]}"
                     + (f" (the runs differ in {' and '.join(across)}: compared along it)" if across else ""))
    return out


def compare_runs(store: RunReader, runs: Sequence[str], max_details: int = 3, strict: bool = False,
                 expect: Optional[Dict[str, str]] = None) -> Comparison:
    return compare_columns(read_columns(store, runs), max_details, strict, expect)


def _unknown_plans(cols: Columns, ok: np.ndarray, result: Comparison) -> None:
    """The ok rows whose plan carries plan_unknown (a plan layout the backend could not read)."""
    plans = cols.dictionary("plan")
    codes = [i for i, p in enumerate(plans) if p and PLAN_UNKNOWN in p and unknown_plan({"plan": p})]
    if not codes or not len(ok):
        return
    rows = cols.rows_in_memory(ok[np.isin(cols.codes("plan")[ok], codes)])
    result.plan_unknown += [(f"{r['run_id']}:{r['key']}", unknown_plan(r)) for _, r in sorted(rows.items())]


def _flag(flags_json: str) -> bool:
    """SGLANG_FLASHINFER_USE_PAGED as the task's environment had it (a row's flags), read as SGLang reads it."""
    try:
        return use_paged_of(json.loads(flags_json or "{}"))
    except ValueError:
        return False  # SGLang warns and reads False (a spec refuses such a value before anything runs)


def _wiring(cols: Columns, ok: np.ndarray, result: Comparison) -> None:
    """The wiring audit of backend sglang's ok rows (wiring.py) against the flag as the task had it and the job's
    deterministic switch: each distinct (wiring, flag, what SGLang read, switch, mode, path, version) is checked
    once; a problem is reported for every row that has it."""
    code = cols.code_of("backend", SGLANG)
    rows = ok[cols.codes("backend")[ok] == code] if code >= 0 else ok[:0]
    verdicts: Dict[tuple, List[str]] = {}
    for _, r in sorted(cols.rows_at(rows).items()):
        det = bool(json.loads(r["knobs"] or "{}").get("deterministic"))
        seen = (r["wiring"], _flag(r["flags"]), bool(r["use_paged"]), det, r["mode"], r["path"], r["sglang"])
        if seen not in verdicts:
            verdicts[seen] = _wiring_problems(*seen)
        result.wiring += [f"{r['run_id']}:{r['key']}: {problem}" for problem in verdicts[seen]]


def _wiring_problems(wiring_json: str, flag: bool, read: bool, det: bool, mode: str, path: str,
                     version: str) -> List[str]:
    if not wiring_json:
        return ["no wiring recorded (what SGLang planned and ran)"]
    problems = [] if read == flag else [
        f"SGLang read {USE_PAGED_FLAG} as {read}, the task's environment had it {flag}"]
    try:
        return problems + wiring_problems(json.loads(wiring_json), flag, det, mode, path, [], version)
    except ValueError as exc:  # a version whose rule detrun has not read
        return problems + [f"not audited: {exc}"]


def _environment(cols: Columns) -> Dict[str, Dict[str, object]]:
    """fingerprint -> its fields, for every fingerprint recorded in the rows (of any status)."""
    if not cols.n:
        return {}
    _, first = np.unique(cols.codes("fingerprint"), return_index=True)
    rows = cols.rows_in_memory(np.sort(first))
    return {r["fingerprint"]: fingerprint_fields(r) for _, r in sorted(rows.items()) if r["fingerprint"]}


def _ran(cols: Columns, ok: np.ndarray, result: Comparison) -> None:
    """Which backends ran (backend attn of the ok rows), and the kernel-audit coverage of the flashinfer
    rows: every (run, path, plan) needs one row whose kernels were recorded and audited (a task profiles
    each distinct plan once, under whichever case and mode met it first; a slot's tasks share them out)."""
    if not len(ok):
        return
    backend, attn = cols.codes("backend")[ok], cols.codes("attn")[ok]
    names, attns = cols.dictionary("backend"), cols.dictionary("attn")
    pairs = np.unique(np.stack([backend, attn]), axis=1).T.tolist()
    result.backends = sorted({f"{names[b]} {attns[a]}".strip() for b, a in pairs})
    fi = [names.index(b) for b in (MODEL, SGLANG) if b in names]  # the rows FlashInfer's kernels ran for
    rows = ok[np.isin(backend, fi)]
    if not len(rows):
        return
    key = ("run_id", "path", "plan")
    group = densify(combine([cols.codes(c)[rows] for c in key])[0])
    size = int(group.max()) + 1
    audited = np.bincount(group, weights=cols.profiled[rows], minlength=size) > 0
    result.audit_groups = size
    first = np.zeros(size, dtype=np.int64)
    first[group[::-1]] = rows[::-1]
    lacking = first[~audited]
    specs: Dict[str, JobSpec] = {}  # each run's, parsed once
    for _, r in sorted(cols.rows_in_memory(lacking).items()):
        run = r["run_id"]
        if run not in specs:
            specs[run] = spec_from_dict(cols.manifests[run]["spec"], run)
        why = _unprofiled(specs[run], r["path"], r["plan"])
        plan = hashlib.blake2b(r["plan"].encode(), digest_size=4).hexdigest()
        result.unaudited.append((f"{r['run_id']}: path {r['path']} plan {plan} (first in {r['case']}/{r['mode']})",
                                 why))


def _unprofiled(spec: JobSpec, path: str, plan: str) -> str:
    """Why no row of this (path, plan) has its kernels: profiling off, or none recorded (and, when a slot's
    tasks share the profiling, the task whose share it was)."""
    if not spec.flashinfer.profile_kernels:
        return "profile_kernels: false"
    why = f"no kernels recorded (profile_repeats: {spec.flashinfer.profile_repeats})"
    owner = profiled_by(spec, path, plan)
    return why + (f"; its slot's tasks share the profiling: the task of repeats {owner[0]}-{owner[-1]} profiles it"
                  if owner else "")


_INPUTS = ("seed", "draws")  # what picks a request's values (kernels/inputs.py), beside its name and sizes


def _same_inputs(runs: Sequence[str], specs: Sequence[dict]) -> None:
    """Raise DetrunError when the runs drew their requests' values differently: their bits are not comparable."""
    values = [{f: s.get(f, JobSpec.model_fields[f].default) for f in _INPUTS} for s in specs]
    fields = [f for f in _INPUTS if len({v[f] for v in values}) > 1]
    if fields:
        said = "; ".join(f"{f}: " + ", ".join(f"{run} {v[f]}" for run, v in zip(runs, values)) for f in fields)
        raise DetrunError(f"the runs drew different inputs ({said}): their bits cannot be compared")


def compare_columns(cols: Columns, max_details: int = 3, strict: bool = False,
                    expect: Optional[Dict[str, str]] = None) -> Comparison:
    """compare_runs over rows already read: grouping on integer codes, Python only for the groups
    whose plans or digests are not all one (their mismatches, notes and counts). The claims are the
    runs' specs' (expect, deterministic), then expect, then strict (every axis bitwise)."""
    specs = [cols.manifests[run]["spec"] for run in cols.runs]
    _same_inputs(cols.runs, specs)
    result = Comparison(list(cols.runs), claims=claims_of(specs, expect, strict))
    result.profiles = sorted({p for p in (profile_label(s.get("sglang")) for s in specs) if p})
    result.rows = cols.n
    result.environment = _environment(cols)
    _check_cells(cols, result)
    ok = _statuses(cols, result)
    _ran(cols, ok, result)
    _wiring(cols, ok, result)
    _unknown_plans(cols, ok, result)
    take = (lambda a: a) if len(ok) == cols.n else (lambda a: a[ok])  # noqa: E731
    part = {c: take(cols.codes(c)) for c in AXES.values()}
    req = take(cols.codes("request"))
    signatures, _ = combine([cols.codes(c) for c in PLAN_COLUMNS + ("plan",) + ENV_FIELDS])  # every row's
    sig = take(signatures)
    judged, _ = combine([sig, take(cols.codes("out_digest")), take(cols.codes("lse_digest"))])  # plan + digests
    by_axis = dict.fromkeys(AXES, judged)
    phase = part[AXES[LAST]]
    if not _one(phase):  # prefill beside decode: only their last tokens' digests (their
        # plans always differ, and an equality is not noted: _GroupJudge)
        by_axis[LAST], _ = combine([take(cols.codes(f"last_{d}_digest")) for d in ("out", "lse")])
    nreq = int(req.max()) + 1 if len(req) else 0
    none = np.zeros(nreq, dtype=np.int64)
    # an axis of one value (one backend, one version, one run) has no group: not grouped at all
    per_axis = {axis: (none, none, ok[:0]) for axis, col in AXES.items() if _one(part[col])}
    for axis, (group, size) in _groupings(req, part, [a for a in AXES if a not in per_axis]):
        keep = _one_run_each(group, part[AXES[axis]], part[AXES["run"]]) if axis in CROSS_RUN else None
        if keep is None:
            per_axis[axis] = _axis_groups(ok, group, size, part[AXES[axis]], req, by_axis[axis], nreq)
        else:
            per_axis[axis] = _axis_groups(ok[keep], group[keep], size, part[AXES[axis]][keep], req[keep],
                                          by_axis[axis][keep], nreq)
    judged_any = np.unique(np.concatenate([judged for _, _, judged in per_axis.values()]))
    rows = cols.rows_in_memory(judged_any)
    detail = _in_order(cols, judged_any)
    by_request: Dict[str, List[int]] = defaultdict(list)
    for i in detail:
        by_request[rows[i]["request"]].append(i)
    blobs, words = Blobs(cols.store, cols.runs, cols.manifests), PairWords(signatures.tolist())
    names = cols.dictionary("request")
    judged_sets = {axis: set(judged.tolist()) for axis, (_, _, judged) in per_axis.items()}
    # a row's group along an axis: the codes of every other axis's column, by read-order index (judged axes only)
    group_keys = {axis: combine([cols.codes(c) for c in AXES.values() if c not in _dropped(axis)])[0].tolist()
                  if judged_sets[axis] else [] for axis in AXES}
    for code in sorted(np.unique(req).tolist(), key=names.__getitem__):
        request = names[code]
        for axis in AXES:
            groups, nrows, _ = per_axis[axis]
            judged_rows, key = judged_sets[axis], group_keys[axis]
            judge = _GroupJudge(result, request, axis, blobs, words, max_details)
            members: Dict[int, List[dict]] = defaultdict(list)
            for i in by_request[request]:
                if i in judged_rows:
                    members[key[i]].append(rows[i])
            differing = explained_only = 0
            for group in members.values():
                unexplained, explained = judge(group)
                differing += unexplained
                explained_only += explained and not unexplained
            status = ("n/a" if not groups[code] else "differs" if differing else
                      "explained" if explained_only else "equal")
            result.verdicts.append(AxisVerdict(request, axis, status, int(groups[code]), int(nrows[code]),
                                               differing, explained_only, judge.causes,
                                               judge.measured if judge.measured and judge.measured.pairs else None))
    claimed = [a for a in AXES if result.claims.required(a) or result.claims.strict]
    result.uncompared = _uncompared(cols, [a for a in claimed if not per_axis[a][0].sum()])
    return result
