"""--format json: one JSON document per command, built from the objects the text output prints.

compare -> verdict_doc(Verdict), history -> history_doc(History), status -> status_doc(RunStatus),
bisect -> bisect_doc(Bisected),
list -> list_doc((run id, manifest or error) pairs). The schema is in README.md ("--format json").
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ..judge.history import History
from ..judge.verdict import Cell, Finding, Verdict

SCHEMA = 1  # bumped when a field changes meaning or goes


def dumps(doc: Dict[str, Any]) -> str:
    return json.dumps({"schema": SCHEMA, **doc}, indent=2)


def _finding(f: Finding) -> Dict[str, Any]:
    return {**_plain(f), "label": f.label, "tag": f.tag}


def _cell(c: Cell) -> Dict[str, Any]:
    v = c.verdict
    return {"state": c.state, "word": c.word, "text": c.text, "status": v.status, "groups": v.groups,
            "rows": v.rows, "differing_groups": v.differing_groups, "explained_groups": v.explained_groups,
            "causes": dict(v.causes), "measured": _plain(v.measured)}


def verdict_doc(v: Verdict) -> Dict[str, Any]:
    """The Verdict as plain JSON values: everything the terminal, JUnit and HTML show."""
    return {
        "verdict": v.label, "exit_code": int(v.exit_code), "failed": v.failed, "headline": v.headline,
        "summary": list(v.summary), "runs": list(v.runs), "rows": v.rows,
        "claims": [_plain(c) for c in v.claims],
        "findings": [_finding(f) for f in v.findings],
        "table": {request: {axis: _cell(c) for axis, c in cells.items()} for request, cells in v.cells.items()},
        "baseline": _plain(v.baseline), "environment": _plain(v.environment), "max_ulp": dict(v.max_ulp),
    }


def history_doc(hist: History) -> Dict[str, Any]:
    """Every run's summary (oldest first), every drift and every job's story (known good -> broken -> fixed),
    each with the line the text prints for it."""
    return {"runs": [{**_plain(r), "differs": r.differs} for r in hist.runs],
            "drifts": [{**_plain(d), "text": str(d)} for d in hist.drifts],
            "stories": [{**_plain(s), "text": str(s)} for s in hist.stories]}


def bisect_doc(found: Any) -> Dict[str, Any]:
    """detrun bisect (run.bisect.Bisected): every probe, the outcome, the two versions, what changed, the job."""
    s = found.search
    return {"job": found.job, "exit_code": int(found.code), "outcome": s.outcome, "versions": list(s.versions),
            "probes": [{**_plain(p), "state": p.state} for p in s.probes],
            "last_held": s.good.version if s.good else None, "first_broke": s.bad.version if s.bad else None,
            "changes": list(found.changes), "written": found.written, "command": found.command or None}


def status_doc(st: Any, job_state: Optional[str]) -> Dict[str, Any]:
    """detrun status (run.submission.RunStatus) and its Ray job's state, asked now (None: not submitted)."""
    doc = {k: v for k, v in _plain(st).items() if k != "job"}
    doc["job"] = None if st.job is None else {"address": st.job[0], "submission_id": st.job[1], "state": job_state}
    return doc


def list_doc(runs: Iterable[Tuple[str, Union[Mapping[str, Any], Exception]]]) -> Dict[str, Any]:
    """detrun list: each run's status, GPUs and spec path, or why it is damaged."""
    out: List[Dict[str, Any]] = []
    for run_id, manifest in runs:
        if isinstance(manifest, Exception):
            out.append({"run_id": run_id, "status": "damaged", "damaged": str(manifest)})
        else:
            out.append({"run_id": run_id, "status": manifest.get("status"), "gpus": manifest.get("gpus"),
                        "spec_path": manifest.get("spec_path"), "damaged": None})
    return {"runs": out}


def _plain(obj: Any) -> Any:
    """Dataclasses, mappings and sequences as dicts and lists, enums by value, recursively."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    return obj.value if isinstance(obj, Enum) else obj
