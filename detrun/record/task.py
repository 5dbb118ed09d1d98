"""What a shard task returns to the driver (run/worker.py -> run/runner.py), over Ray: plain values only
(dicts, lists, str, bytes, numbers), so the driver unpickles it without torch (tests/test_worker.py).
TypedDicts: at runtime each is the dict it describes."""

from __future__ import annotations

from typing import Any, Dict, List, TypedDict

from .rows import RowFields


class Deferred(TypedDict):
    """A cell the task hands back to run alone in an isolated worker (run/isolation.py)."""

    case: str
    mode: str
    repeat: int
    phase: str
    kind: str  # known_bug | lost_context
    reason: str


class TaskResult(TypedDict):
    """One shard task's result."""

    rows: List[RowFields]  # in cell order; none for the cells deferred
    blobs: Dict[str, bytes]  # digest -> the bytes first seen in this task (spec.store_tensors)
    note: str  # said once per run (e.g. "backend auto -> reference ...")
    deferred: List[Deferred]
    environment_error: str  # not "": the task's environment is not the job's; no rows, the run stops (exit 2)
    timings: Dict[str, Any]  # where the task's seconds went (stages.py; the driver adds its own)
