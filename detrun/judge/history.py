"""History of the runs under a root: one line per run, and where each case first started to differ.

The rows of every run are read once as integer codes (columnar.py) and compared as arrays. A case is
compared only with earlier runs of the same job (spec name and a hash of what defines its cells) and
fingerprint: for each (job, case, request, mode, phase, fingerprint) each run's set of digests is compared with
the earliest run's; the first run whose set differs is named. A run that cannot be read is listed as
damaged, and the others are still shown.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping

import numpy as np

from ..errors import DetrunError
from ..record.keys import key_mode
from ..record.manifest import Manifest
from ..record.status import RunStatus
from ..spec.model import ROW_NEUTRAL, as_validated
from ..store.requests import RunsRequest
from ..store.runs import RunStore
from .columnar import Columns, combine, densify, read_columns
from .compare import compare_columns
from .findings import judge
from .verdict import FAIL, NOT_VERIFIED, WARN

_KEY = ("case", "request", "mode", "phase", "fingerprint")
# Spec fields that change neither which cells a job has nor what a cell computes.
_NOT_JOB = ("name", "repeats", "repeats_per_task", "store_tensors", *ROW_NEUTRAL)
_NOT_JOB_FLASHINFER = ("profile_kernels", "profile_repeats")


def job_of(spec: dict) -> str:
    """name@hash: the job a run belongs to (the spec without repeats, claims and profiling knobs)."""
    defining = {k: v for k, v in as_validated(spec).items() if k not in _NOT_JOB}
    if isinstance(defining.get("flashinfer"), dict):
        defining["flashinfer"] = {k: v for k, v in defining["flashinfer"].items() if k not in _NOT_JOB_FLASHINFER}
    text = json.dumps(defining, sort_keys=True, default=str)
    return f"{spec.get('name', '?')}@{hashlib.blake2b(text.encode(), digest_size=4).hexdigest()}"


@dataclass
class RunSummary:
    index: int  # 1-based, oldest first
    run_id: str
    created: str
    spec: str
    fingerprints: List[str]
    verdict: str  # pass | FAIL | NOT VERIFIED | incomplete | damaged
    job: str = ""
    rows: int = 0
    ok: int = 0
    counts: Dict[str, int] = field(default_factory=dict)  # finding kind -> count (fail and warn kinds)
    headline: str = ""  # the verdict line, or why the run cannot be read
    unverified: List[str] = field(default_factory=list)  # what had to be checked and was not (claims, the run)
    bounds: List[str] = field(default_factory=list)  # bound claims and what they measured ("batch ulp:4 held: ...")

    @property
    def differs(self) -> int:
        """(request, axis) comparisons with an unexplained difference."""
        return self.counts.get("differs", 0)


@dataclass
class Drift:
    job: str
    case: str
    request: str
    mode: str
    phase: str
    fingerprint: str
    index: int
    run_id: str
    since_index: int
    since: str

    def __str__(self) -> str:
        mode = key_mode(self.mode, self.phase)
        return (f"{self.job} {self.case}/{self.request}/{mode} [{self.fingerprint}]: first differs at run "
                f"{self.index} ({self.run_id}), against run {self.since_index} ({self.since})")


@dataclass
class History:
    runs: List[RunSummary] = field(default_factory=list)
    drifts: List[Drift] = field(default_factory=list)


def _summary(index: int, run_id: str, cols: Columns, job: str) -> RunSummary:
    manifest = cols.manifests[run_id]
    verdict = judge(compare_columns(cols, max_details=0))
    label = (NOT_VERIFIED if verdict.label == NOT_VERIFIED else "FAIL" if verdict.failed
             else "pass" if manifest.get("status") == RunStatus.COMPLETE else "incomplete")
    fingerprints = cols.dictionary("fingerprint")
    ok = len(cols.ok_rows())
    counts = {k: n for k, n in verdict.counts().items()
              if any(f.kind == k and f.severity in (FAIL, WARN) for f in verdict.findings)}
    return RunSummary(
        index, run_id, manifest.get("created", ""), manifest["spec"]["name"],
        sorted({fingerprints[c] for c in np.unique(cols.codes("fingerprint")).tolist()} - {""}), label,
        job, cols.n, ok, counts, verdict.headline,
        [f.title for f in verdict.findings
         if f.severity == FAIL and f.kind in ("unverified_claim", "nothing_compared")],
        [c.text for c in verdict.claims if c.measured])


def _drifts(cols: Columns, index: Dict[str, int], jobs: Dict[str, str]) -> List[Drift]:
    """Per (job, case, request, mode, phase, fingerprint): the first run whose set of (out, lse) digests is not
    the earliest run's. Sets compared as arrays of distinct (key, run, digests) codes."""
    ok = cols.ok_rows()
    if not len(ok):
        return []
    names = cols.dictionary("run_id")
    run_codes = cols.codes("run_id")[ok]
    run = np.array([index[r] if r in index else 0 for r in names], dtype=np.int64)[run_codes]
    job_names = sorted(set(jobs.values()))
    job = np.array([job_names.index(jobs[r]) if r in jobs else -1 for r in names], dtype=np.int64)[run_codes]
    key = densify(combine([job] + [cols.codes(c)[ok] for c in _KEY])[0])
    ident = densify(combine([cols.codes("out_digest")[ok], cols.codes("lse_digest")[ok]])[0])
    triple = densify(combine([key, run, ident])[0])
    rep = np.zeros(int(triple.max()) + 1, dtype=np.int64)
    rep[triple] = np.arange(len(triple))
    k, r, i = key[rep], run[rep], ident[rep]  # the distinct (key, run, digests)
    first = np.full(int(k.max()) + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, k, r)
    pair = densify(combine([k, r])[0])
    size = np.bincount(pair)
    width = int(i.max()) + 1
    member = np.isin(k * width + i, (k * width + i)[r == first[k]])
    matched = np.bincount(pair, weights=member, minlength=len(size))
    first_pair = pair[r == first[k]]
    first_size = np.zeros(len(first), dtype=np.int64)
    first_size[k[r == first[k]]] = size[first_pair]
    prep = np.zeros(len(size), dtype=np.int64)
    prep[pair] = np.arange(len(pair))
    pk, pr = k[prep], r[prep]
    differs = (matched != size) | (size != first_size[pk])
    drift = np.full(len(first), np.iinfo(np.int64).max)
    np.minimum.at(drift, pk[differs], pr[differs])
    runs = {i: name for name, i in index.items()}
    key_rows = np.zeros(len(first), dtype=np.int64)
    key_rows[key] = ok
    out = []
    for kk in np.flatnonzero(drift < np.iinfo(np.int64).max).tolist():
        row = cols.rows_in_memory(np.array([key_rows[kk]]))[int(key_rows[kk])]
        case, request, mode, phase, fingerprint = (row[c] for c in _KEY)
        out.append(Drift(jobs[row["run_id"]], case, request, mode, phase, fingerprint, int(drift[kk]),
                         runs[int(drift[kk])], int(first[kk]), runs[int(first[kk])]))
    return sorted(out, key=lambda d: (d.index, d.job, d.case, d.request, d.mode, d.phase, d.fingerprint))


def _manifests(store: RunStore, runs: List[str], damaged: Dict[str, str]) -> Dict[str, Manifest]:
    """The readable manifests (a damaged run's too, for its place in time); why each damaged run is
    (RunStore.damage, as detrun list says it) in damaged."""
    out = {}
    for run in runs:
        damage = store.damage(run)
        if damage:
            damaged[run] = damage
        try:
            manifest = store.manifest(run)
            job_of(manifest["spec"])
            out[run] = manifest
        except (DetrunError, KeyError, TypeError, AttributeError) as exc:
            damaged[run] = damage or (str(exc) if isinstance(exc, DetrunError) else
                                      f"manifest without a spec ({exc!r})")
    return out


def history(store: RunStore) -> History:
    """Every run under the root, oldest first (damaged ones too), and per job where each case first differed."""
    damaged: Dict[str, str] = {}
    runs = store.list_runs()
    manifests = _manifests(store, runs, damaged)
    readable = sorted((r for r in manifests if r not in damaged), key=lambda r: (manifests[r].get("created", ""), r))
    cols = read_columns(store, readable, damaged, manifests)
    summaries, jobs = {}, {r: job_of(manifests[r]["spec"]) for r in cols.runs}
    for r in cols.runs:
        try:
            summaries[r] = _summary(0, r, cols.only(r), jobs[r])
        except DetrunError as exc:
            damaged[r] = str(exc)
    order = sorted(runs, key=lambda r: (0, manifests[r].get("created", ""), r) if r in manifests else (1, "", r))
    out = []
    for i, r in enumerate(order, 1):
        if r in summaries:
            summaries[r].index = i
            out.append(summaries[r])
        else:
            known: Mapping[str, Any] = manifests.get(r) or {}  # unreadable: none
            spec = known.get("spec", {})
            out.append(RunSummary(i, r, known.get("created", ""), spec.get("name", "?"), [],
                                  "damaged", headline=damaged.get(r, "unreadable")))
    index = {s.run_id: s.index for s in out if s.run_id in summaries}
    good = [r for r in cols.runs if r in summaries]
    kept = cols if len(good) == len(cols.runs) else read_columns(store, good, manifests=manifests)
    return History(out, _drifts(kept, index, {r: jobs[r] for r in good}))


def history_under(req: RunsRequest) -> History:
    """detrun history: every run under req.runs_root."""
    return history(RunStore(req.runs_root))
