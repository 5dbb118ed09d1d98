"""A run's manifest (<run_id>/manifest.json) and the Jobs API record beside it (.submissions/<run_id>.json).

TypedDicts: the JSON documents as they are read and written (store/manifests.py is the one place that
does). REQUIRED are the fields every manifest has, with the JSON type each must have: a document without
one of them is not a manifest (store/manifests.py says which field and what it got).
"""

from __future__ import annotations

import typing
from typing import Any, Dict, List, Optional, TypedDict


class DriverRecord(TypedDict):
    """The driver of a running run, beating (store/heartbeat.py)."""

    host: str
    pid: int
    heartbeat_unix: float
    period_s: float


class _Required(TypedDict):
    run_id: str
    spec: Dict[str, Any]  # the job spec it ran, as JSON (spec_from_dict reads it)
    gpus: int  # GPU slots
    status: str  # a RunStatus value


class Manifest(_Required, total=False):
    """One run's manifest: the required fields, and what the driver adds as the run goes."""

    spec_path: str
    created: str  # ISO 8601, UTC
    finished: str
    driver: DriverRecord
    failures: List[str]
    resumed: List[str]  # when each resume started
    timings: Dict[str, Any]  # the driver's (placement_group_s, tasks_s, driver_peak_rss_mb)
    accelerator_type: Optional[str]
    submission_id: str  # the Jobs API submission whose driver wrote it, and where
    job_address: str
    environment: Dict[str, Any]  # a job with versions: the environment its tasks ran in (spec/versions.py manifest())


class SubmissionRecord(TypedDict):
    """The Jobs API submissions of one run, kept beside the runs (the job may not have written a manifest yet)."""

    run_id: str
    address: str
    submission_ids: List[str]


REQUIRED: Dict[str, type] = {name: typing.get_origin(hint) or hint
                             for name, hint in typing.get_type_hints(_Required).items()}
