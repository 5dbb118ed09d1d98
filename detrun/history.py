"""History of the runs under a root: one line per run, and where each case first started to differ.

The rows of every run are read as one pyarrow dataset. For each (case, request, mode, fingerprint)
each run's set of digests is compared with the earliest run of that fingerprint; the first run whose
set differs is named.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Set, Tuple

from .compare import compare_runs
from .store import RunStore

_COLUMNS = ["run_id", "case", "request", "mode", "status", "out_digest", "lse_digest", "fingerprint"]


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


def _summary(store: RunStore, index: int, run_id: str, rows: List[dict]) -> RunSummary:
    manifest = store.manifest(run_id)
    cmp = compare_runs(store, [run_id], max_details=0)
    verdict = "FAIL" if cmp.failed else ("pass" if manifest.get("status") == "complete" else "incomplete")
    return RunSummary(
        index, run_id, manifest.get("created", ""), manifest["spec"]["name"],
        sorted({r["fingerprint"] for r in rows if r["fingerprint"]}), verdict, len(rows),
        sum(r["status"] == "ok" for r in rows), len(cmp.errors), len(cmp.missing),
        sum(v.status == "differs" for v in cmp.verdicts), sum(v.status == "explained" for v in cmp.verdicts))


def history(store: RunStore) -> History:
    runs = store.list_runs()
    created = {r: store.manifest(r).get("created", "") for r in runs}
    runs.sort(key=lambda r: (created[r], r))
    index = {r: i + 1 for i, r in enumerate(runs)}
    per_run: Dict[str, List[dict]] = defaultdict(list)
    digests: Dict[Tuple[str, str, str, str], Dict[str, Set[tuple]]] = defaultdict(lambda: defaultdict(set))
    for r in store.dataset(runs).to_table(columns=_COLUMNS).to_pylist():
        per_run[r["run_id"]].append(r)
        if r["status"] == "ok":
            key = (r["case"], r["request"], r["mode"], r["fingerprint"])
            digests[key][r["run_id"]].add((r["out_digest"], r["lse_digest"]))
    out = History([_summary(store, index[r], r, per_run[r]) for r in runs])
    for key in sorted(digests):
        seen = sorted(digests[key], key=index.get)
        first = seen[0]
        for run_id in seen[1:]:
            if digests[key][run_id] != digests[key][first]:
                out.drifts.append(Drift(*key, index[run_id], run_id, index[first], first))
                break
    out.drifts.sort(key=lambda d: (d.index, d.case, d.request, d.mode))
    return out
