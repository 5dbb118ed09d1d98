"""Crash isolation, the bookkeeping (no Ray): cells run alone in sacrificial workers, and their rows.

A shard task hands back the cells it must not run itself (known bugs; cells after its CUDA context was
lost); a shard whose process died has every cell re-run alone. Each such cell is an Isolated item the
runner schedules as its own Ray task with a timeout. A ShardBook holds the shard's rows until every
isolated cell has its rows, so the shard is still written in one atomic file. BugSamples runs only the
first `samples` cells of each known bug: once one reproduces, the others are recorded with that
outcome; one that does not reproduce lets the rest run too.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ..record.keys import row_key
from ..record.rows import make_row
from ..record.status import Status
from ..record.task import Deferred
from ..spec.matrix import Cell, Shard, cells_for
from ..spec.model import JobSpec

# Why a cell runs alone (Isolated.kind); not a row's status (record/status.py), although known_bug is both.
KNOWN_BUG, LOST_CONTEXT, CRASHED = "known_bug", "lost_context", "crashed"
NOT_REPRODUCED = "known bug did not reproduce (fixed?)"
REPRODUCED = "known bug reproduced in an isolated worker"


@dataclass(frozen=True)
class Isolated:
    """One cell of a shard, run alone in a sacrificial worker."""

    shard: Shard
    cell: Cell
    kind: str  # known_bug | lost_context | crashed
    reason: str  # the known bug, or what happened to the task that could not run it

    @property
    def force(self) -> bool:
        """Run a known-bug cell anyway (that is the point of isolating it)."""
        return self.kind == KNOWN_BUG

    @property
    def task_id(self) -> str:
        phase = "" if self.cell.phase == "prefill" else f"-{self.cell.phase}"
        return f"{self.shard.shard_id}-{self.cell.case}-{self.cell.mode}{phase}-r{self.cell.repeat}"

    @property
    def key(self) -> str:
        return f"{self.cell.label}/g{self.shard.slot}"


CellKey = Tuple[str, str, int, str]  # case, mode, repeat, phase


def _cell_of(row: dict) -> CellKey:
    return row["case"], row["mode"], row["repeat"], row.get("phase") or "prefill"


def _key(cell: Cell) -> CellKey:
    return cell.case, cell.mode, cell.repeat, cell.phase


def deferred_cell(d: Deferred) -> Cell:
    """A cell a shard task handed back (worker.py's deferred entry; one without a phase is prefill)."""
    return Cell(d["case"], d["mode"], d["repeat"], d.get("phase") or "prefill")


def unfinished_rows(spec: JobSpec, run_id: str, shard: Shard, cells: Iterable[Cell], status: str,
                    reason: str) -> List[dict]:
    """A row per request of each cell, with no result (the cells did not finish), in the cells' order."""
    return [dict(make_row(run_id=run_id, key=row_key(cell.case, request, cell.mode, cell.repeat, shard.slot,
                                                     cell.phase),
                          case=cell.case, request=request, mode=cell.mode, phase=cell.phase, repeat=cell.repeat,
                          slot=shard.slot, shard=shard.shard_id, status=status, reason=reason))  # as a task's rows
            for cell in cells for request in spec.members(cell.case)]


def cell_rows(spec: JobSpec, run_id: str, item: Isolated, status: str, reason: str) -> List[dict]:
    """The rows of one isolated cell that did not finish."""
    return unfinished_rows(spec, run_id, item.shard, [item.cell], status, reason)


def finished_rows(item: Isolated, rows: List[dict]) -> List[dict]:
    """The rows an isolated worker returned; a known bug's are marked reproduced (its cell failed) or not."""
    if item.kind != KNOWN_BUG:
        return rows
    for row in rows:
        if row["status"] == Status.OK:
            row["reason"] = f"{NOT_REPRODUCED}: {item.reason}"
        else:
            row["status"], row["reason"] = Status.KNOWN_BUG.value, f"{REPRODUCED}: {row['reason']} ({item.reason})"
    return rows


def lost_rows(spec: JobSpec, run_id: str, item: Isolated, what: str) -> List[dict]:
    """The rows of a cell whose isolated worker died or hung (`what` says which)."""
    if item.kind == KNOWN_BUG:
        return cell_rows(spec, run_id, item, Status.KNOWN_BUG, f"{REPRODUCED}: {what} ({item.reason})")
    return cell_rows(spec, run_id, item, Status.ERROR, f"isolated: {what} (run alone because {item.reason})")


def reproduced(rows: List[dict]) -> bool:
    return any(r["status"] != Status.OK for r in rows)


class ShardBook:
    """A shard's rows, kept until every isolated cell has its rows; then written as one file."""

    def __init__(self, spec: JobSpec, shard: Shard, out: Optional[Mapping[str, Any]], waiting: List[Cell]):
        """out: the shard task's TaskResult, None when its process died."""
        self.spec, self.shard = spec, shard
        self.by_cell: Dict[CellKey, List[dict]] = defaultdict(list)
        for row in (out or {}).get("rows", []):
            self.by_cell[_cell_of(row)].append(row)
        self.blobs: Dict[str, bytes] = dict((out or {}).get("blobs", {}))
        self.timings: dict = dict((out or {}).get("timings", {}))
        self.note: str = (out or {}).get("note", "")
        self.waiting = {_key(c) for c in waiting}

    def fill(self, cell: Cell, rows: List[dict], blobs: Optional[Dict[str, bytes]] = None) -> None:
        self.waiting.discard(_key(cell))
        self.by_cell[_key(cell)] = list(rows)
        self.blobs.update(blobs or {})

    @property
    def done(self) -> bool:
        return not self.waiting

    def rows(self) -> List[dict]:
        """Every row of the shard, in the order its cells run."""
        return [row for cell in cells_for(self.spec, self.shard.repeats)
                for row in self.by_cell.get(_key(cell), [])]


class BugSamples:
    """Which known-bug cells run: the first `samples` per bug; after a reproduction, none more."""

    def __init__(self, samples: int):
        self.samples = samples
        self.started: Counter = Counter()
        self.outcome: Dict[str, Tuple[bool, str]] = {}  # bug -> (reproduced, where)
        self.waiting: Dict[str, List[Isolated]] = defaultdict(list)

    def admit(self, item: Isolated) -> str:
        """run (start it now) | wait (a sample of its bug is running) | reproduced (record it unrun)."""
        bug = item.reason
        if self.outcome.get(bug, (False, ""))[0]:
            return "reproduced"
        if bug not in self.outcome and self.started[bug] >= self.samples:
            self.waiting[bug].append(item)
            return "wait"
        self.started[bug] += 1
        return "run"

    def resolve(self, item: Isolated, was_reproduced: bool) -> List[Isolated]:
        """Record a sample's outcome; return the waiting cells of its bug (to run, or to record unrun)."""
        bug = item.reason
        if not self.outcome.get(bug, (False, ""))[0]:
            self.outcome[bug] = (was_reproduced, item.key)
        return self.waiting.pop(bug, [])

    def unrun_rows(self, spec: JobSpec, run_id: str, item: Isolated) -> List[dict]:
        _, where = self.outcome[item.reason]
        return cell_rows(spec, run_id, item, Status.KNOWN_BUG, f"not run: {item.reason}; it reproduced at {where}")
