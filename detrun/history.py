"""History of the runs under a root: one line per run, and where each case first started to differ.

The rows of every run are read once as integer codes (columnar.py) and compared as arrays. For each (case, request, mode, fingerprint)
each run's set of digests is compared with the earliest run of that fingerprint; the first run whose
set differs is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

from .columnar import Columns, combine, densify, read_columns
from .compare import compare_columns
from .store import RunStore

_KEY = ("case", "request", "mode", "fingerprint")


@dataclass
class RunSummary:
    index: int  # 1-based, oldest first
    run_id: str
    created: str
    spec: str
    fingerprints: List[str]
    verdict: str  # pass | FAIL | incomplete
    rows: int = 0
    ok: int = 0
    errors: int = 0
    missing: int = 0
    differs: int = 0  # (request, axis) verdicts with an unexplained difference
    explained: int = 0


@dataclass
class Drift:
    case: str
    request: str
    mode: str
    fingerprint: str
    index: int
    run_id: str
    since_index: int
    since: str

    def __str__(self) -> str:
        return (f"{self.case}/{self.request}/{self.mode} [{self.fingerprint}]: first differs at run "
                f"{self.index} ({self.run_id}), against run {self.since_index} ({self.since})")


@dataclass
class History:
    runs: List[RunSummary] = field(default_factory=list)
    drifts: List[Drift] = field(default_factory=list)


def _summary(index: int, run_id: str, cols: Columns) -> RunSummary:
    manifest = cols.store.manifest(run_id)
    cmp = compare_columns(cols, max_details=0)
    verdict = "FAIL" if cmp.failed else ("pass" if manifest.get("status") == "complete" else "incomplete")
    fingerprints, status = cols.dictionary("fingerprint"), cols.dictionary("status")
    ok = int(np.count_nonzero(cols.codes("status") == status.index("ok"))) if "ok" in status else 0
    return RunSummary(
        index, run_id, manifest.get("created", ""), manifest["spec"]["name"],
        sorted({fingerprints[c] for c in np.unique(cols.codes("fingerprint")).tolist()} - {""}), verdict,
        cols.n, ok, len(cmp.errors), len(cmp.missing),
        sum(v.status == "differs" for v in cmp.verdicts), sum(v.status == "explained" for v in cmp.verdicts))


def _drifts(cols: Columns, index: Dict[str, int]) -> List[Drift]:
    """Per (case, request, mode, fingerprint): the first run whose set of (out, lse) digests is not
    the earliest run's. Sets compared as arrays of distinct (key, run, digests) codes."""
    status = cols.dictionary("status")
    ok = np.flatnonzero(cols.codes("status") == (status.index("ok") if "ok" in status else -1))
    if not len(ok):
        return []
    names = cols.dictionary("run_id")
    run = np.array([index[r] if r in index else 0 for r in names], dtype=np.int64)[cols.codes("run_id")[ok]]
    key = densify(combine([cols.codes(c)[ok] for c in _KEY])[0])
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
        out.append(Drift(*(row[c] for c in _KEY), int(drift[kk]), runs[int(drift[kk])],
                         int(first[kk]), runs[int(first[kk])]))
    return sorted(out, key=lambda d: (d.index, d.case, d.request, d.mode, d.fingerprint))


def history(store: RunStore) -> History:
    runs = store.list_runs()
    created = {r: store.manifest(r).get("created", "") for r in runs}
    runs.sort(key=lambda r: (created[r], r))
    index = {r: i + 1 for i, r in enumerate(runs)}
    cols = read_columns(store, runs)
    return History([_summary(index[r], r, cols.only(r)) for r in runs], _drifts(cols, index))
