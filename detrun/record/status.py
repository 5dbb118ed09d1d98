"""The statuses a row and a run are stored with: one type each, whose members are the stored strings.

Both are str subclasses: a member equals (and is hashed and formatted as) its string, so
`row["status"] == Status.OK` holds for a row read back from Parquet, and the files keep the strings. A
member pickles as the Enum, though: rows carry `.value` (a plain str), as they cross Ray as plain values.
"""

from __future__ import annotations

from enum import Enum
from typing import Mapping


class _Stored(str, Enum):
    """A str Enum that prints as its value on every Python (3.10 too), like 3.11's StrEnum."""

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]


class Status(_Stored):
    """A row's status (the `status` column)."""

    OK = "ok"
    SKIPPED = "skipped"  # not run: the backend does not support the cell
    KNOWN_BUG = "known_bug"  # not run, or run and reproduced: a bug the backend declares
    ERROR = "error"  # the cell failed (its reason says how)


class RunStatus(_Stored):
    """A run's status (manifest.json's `status`)."""

    RUNNING = "running"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"


def run_complete(manifest: Mapping[str, object]) -> bool:
    """Whether a run's manifest says it finished (what compare's incomplete_run and history's verdict read)."""
    return manifest.get("status") == RunStatus.COMPLETE
