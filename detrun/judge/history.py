"""History of the runs under a root: one line per run, and where each case first started to differ.

The rows of every run are read once as integer codes (columnar.py) and compared as arrays. A case is
compared only with earlier runs of the same job (spec name and a hash of what defines its cells) and
fingerprint: for each (job, case, request, mode, phase, fingerprint) each run's set of digests is compared with
the earliest run's; the first run whose set differs is named (never across backends or `versions:` environments:
the judge's cross-run axes compare those). A run that cannot be read is listed as
damaged, and the others are still shown.

Per job, the versions each run used (its rows' `version`: the job's versions: environment, and the package
versions of its fingerprint) and where the job first broke and was later fixed: a Story of turns, "known good
0.5.10 (run X) -> broken 0.5.11 (run Y) -> fixed 0.5.13 (run Z)", ordered by version where every run's version
is known, else by time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from packaging.version import InvalidVersion, Version

from ..errors import DetrunError
from ..record.keys import key_mode
from ..record.manifest import Manifest
from ..record.status import run_complete
from ..spec.model import ROW_NEUTRAL, as_validated
from ..store.requests import RunsRequest
from ..store.runs import RunStore
from .columnar import Columns, combine, densify, read_columns
from .compare import compare_columns
from .findings import judge
from .verdict import FAIL, NOT_VERIFIED, WARN

_KEY = ("case", "request", "mode", "phase", "fingerprint", "backend", "version")
# Spec fields that change neither which cells a job has nor what a cell computes (versions: the environments it
# ran in, as a fingerprint: a job's story runs across them).
_NOT_JOB = ("name", "repeats", "repeats_per_task", "store_tensors", "versions", *ROW_NEUTRAL)
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
    backends: List[str] = field(default_factory=list)  # the backends its rows ran
    versions: List[str] = field(default_factory=list)  # the `versions:` environments its rows ran in
    packages: Dict[str, str] = field(default_factory=dict)  # torch, flashinfer, sglang as its rows recorded them
    broken: List[str] = field(default_factory=list)  # the claims (axes) it broke
    bounds: List[str] = field(default_factory=list)  # bound claims and what they measured ("batch ulp:4 held: ...")

    @property
    def version(self) -> str:
        """Its one versions: environment ("" without, or with several)."""
        return self.versions[0] if len(self.versions) == 1 else ""

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
    backend: str = ""
    version: str = ""  # its `versions:` environment ("" without)

    def __str__(self) -> str:
        mode = key_mode(self.mode, self.phase)
        env = ", ".join(x for x in (self.fingerprint, self.version) if x)  # the job names its backend
        return (f"{self.job} {self.case}/{self.request}/{mode} [{env}]: first differs at run "
                f"{self.index} ({self.run_id}), against run {self.since_index} ({self.since})")


@dataclass
class Turn:
    """A run where a job's state turned: known good (the last that held before a break), broken, fixed,
    broken again."""

    state: str
    label: str  # its version, else the package versions that differ within the job, else its date
    run_id: str
    index: int
    claims: List[str] = field(default_factory=list)  # the claims broken there

    def __str__(self) -> str:
        claims = f"; {', '.join(self.claims)} broke" if self.claims else ""
        return f"{self.state} {self.label} (run {self.run_id}{claims})"


@dataclass
class Story:
    """One job's turns, in version order (by: "version") or in time (by: "time")."""

    job: str
    by: str
    turns: List[Turn] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.job} (by {self.by}): " + " -> ".join(str(t) for t in self.turns)


@dataclass
class History:
    runs: List[RunSummary] = field(default_factory=list)
    drifts: List[Drift] = field(default_factory=list)
    stories: List[Story] = field(default_factory=list)


def _values(cols: Columns, column: str) -> List[str]:
    """The distinct values of a coded column in these rows, sorted, "" left out."""
    names = cols.dictionary(column)
    return sorted({names[c] for c in np.unique(cols.codes(column)).tolist()} - {""})


def _summary(index: int, run_id: str, cols: Columns, job: str) -> RunSummary:
    manifest = cols.manifests[run_id]
    verdict = judge(compare_columns(cols, max_details=0))
    label = (NOT_VERIFIED if verdict.label == NOT_VERIFIED else "FAIL" if verdict.failed
             else "pass" if run_complete(manifest) else "incomplete")
    ok = len(cols.ok_rows())
    counts = {k: n for k, n in verdict.counts().items()
              if any(f.kind == k and f.severity in (FAIL, WARN) for f in verdict.findings)}
    return RunSummary(
        index, run_id, manifest.get("created", ""), manifest["spec"]["name"],
        _values(cols, "fingerprint"), label,
        job, cols.n, ok, counts, verdict.headline,
        [f.title for f in verdict.findings
         if f.severity == FAIL and f.kind in ("unverified_claim", "nothing_compared")],
        _values(cols, "backend"), _values(cols, "version"), _packages(cols),
        [c.axis for c in verdict.claims if c.status == "broken"],
        [c.text for c in verdict.claims if c.measured])


_PACKAGES = ("torch", "flashinfer", "sglang")


def _packages(cols: Columns) -> Dict[str, str]:
    """The package versions of a run's first ok row (else its first row)."""
    if not cols.n:
        return {}
    ok = cols.ok_rows()
    at = int(ok[0]) if len(ok) else 0
    row = cols.rows_in_memory(np.array([at]))[at]
    return {p: row[p] for p in _PACKAGES if row[p]}


def _version_key(name: str) -> Optional[Tuple[str, Version]]:
    """("package", Version) of an environment name (package==version, or a bare version); None if not one."""
    package, _, version = name.rpartition("==")
    try:
        return package, Version(version)
    except InvalidVersion:
        return None


def _labels(runs: List[RunSummary]) -> Dict[str, str]:
    """run -> what names it in a story: its version, else the package versions that differ among the runs,
    else its date."""
    varying = [p for p in _PACKAGES if len({r.packages.get(p, "") for r in runs}) > 1]
    return {r.run_id: r.version or " ".join(f"{p} {r.packages.get(p, '-')}" for p in varying) or r.created[:19]
            for r in runs}


def story(job: str, runs: List[RunSummary]) -> Optional[Story]:
    """The job's turns (None when it never turned): runs that passed or failed, ordered by version when every one
    has a version, else by time (runs come oldest first)."""
    judged = [r for r in runs if r.verdict in ("pass", "FAIL")]
    keys = [_version_key(r.version) if r.version else None for r in judged]
    by = "version" if judged and all(k is not None for k in keys) else "time"
    if by == "version":
        judged = [r for _, r in sorted(zip(keys, judged), key=lambda kr: (kr[0], kr[1].index))]
    labels, turns = _labels(judged), []
    last_good: Optional[RunSummary] = None
    broken = False
    for r in judged:
        if r.verdict == "pass":
            if broken:
                turns.append(Turn("fixed", labels[r.run_id], r.run_id, r.index))
            last_good, broken = r, False
        elif not broken:
            if last_good is not None and not (turns and turns[-1].run_id == last_good.run_id):
                turns.append(Turn("known good", labels[last_good.run_id], last_good.run_id, last_good.index))
            state = "broken again" if any(t.state == "fixed" for t in turns) else "broken"
            turns.append(Turn(state, labels[r.run_id], r.run_id, r.index, list(r.broken)))
            broken = True
    return Story(job, by, turns) if turns else None


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
        case, request, mode, phase, fingerprint, backend, version = (row[c] for c in _KEY)
        out.append(Drift(jobs[row["run_id"]], case, request, mode, phase, fingerprint, int(drift[kk]),
                         runs[int(drift[kk])], int(first[kk]), runs[int(first[kk])], backend, version))
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
    by_job: Dict[str, List[RunSummary]] = {}
    for s in out:
        if s.run_id in summaries:
            by_job.setdefault(s.job, []).append(s)
    stories = [found for job in sorted(by_job) for found in [story(job, by_job[job])] if found]
    return History(out, _drifts(kept, index, {r: jobs[r] for r in good}), stories)


def history_under(req: RunsRequest) -> History:
    """detrun history: every run under req.runs_root."""
    return history(RunStore(req.runs_root))
