"""A run's documents under the runs root: its id, claimed once; its manifest (<run_id>/manifest.json); where
its shards' seconds went (<run_id>/timings/<shard>.json); its Jobs API submissions (.submissions/<run_id>.json).
What each holds is the record's (detrun.record.manifest); this module is the one that reads and writes them."""

from __future__ import annotations

import os
import posixpath
import re
import uuid
from datetime import datetime, timezone
from typing import Dict, List, Optional, cast

import pyarrow.fs as pafs

from ..errors import DetrunError
from ..record.manifest import REQUIRED, Manifest, SubmissionRecord
from ..record.status import RunStatus
from .files import Files, guarded
from .heartbeat import driver_record

RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
RESERVED = ("blobs", "baselines", "jit-cache")  # folders of the root itself


def _with(manifest: Manifest, extra: Dict[str, object]) -> Manifest:
    """The manifest with more of its fields; a name that is not one is an error (as make_row's)."""
    unknown = set(extra) - set(Manifest.__annotations__)
    if unknown:
        raise KeyError(f"not a manifest field: {sorted(unknown)}")
    return cast(Manifest, {**manifest, **extra})


def check_run_id(run_id: str, option: str = "run id") -> str:
    """run_id if it is one plain name under the root (no '/', '\\', leading '.'); else DetrunError naming option."""
    if not RUN_ID.fullmatch(run_id):
        raise DetrunError(f"{option} {run_id!r}: a run id must match ^{RUN_ID.pattern}$ "
                          "(one name under the runs root)")
    if run_id in RESERVED:
        raise DetrunError(f"{option} {run_id!r}: the runs root keeps its own {run_id}/ folder; pick another run id")
    return run_id


def new_run_id(name: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}-{uuid.uuid4().hex[:4]}"


@guarded
class Manifests(Files):
    """The runs under a root, each with its manifest."""

    def create_run(self, run_id: str, spec: dict, gpus: int, spec_path: str = "", **extra) -> Manifest:
        """Claim run_id and write its manifest; of two creates of one id, one fails (see _claim). extra: more of
        Manifest's fields."""
        self._claim(check_run_id(run_id))
        manifest: Manifest = {
            "run_id": run_id,
            "spec": spec,
            "spec_path": spec_path,
            "gpus": gpus,
            "status": RunStatus.RUNNING,
            "created": datetime.now(timezone.utc).isoformat(),
            "driver": driver_record(),
        }
        manifest = _with(manifest, extra)
        self.write_manifest(manifest)
        return manifest

    def check_new_run(self, run_id: str, option: str = "run id") -> None:
        """A DetrunError naming option when run_id is taken under this root (create_run claims it for good)."""
        if self._exists(self._p(run_id)):
            raise DetrunError(f"{option} {run_id}: {self._taken(run_id)}")

    def _taken(self, run_id: str) -> str:
        return f"run {run_id} already exists under {self.root}"

    def _claim(self, run_id: str) -> None:
        """Make the run's directory: atomic on a local root (os.mkdir); on a URI root (no directories
        to make atomically) it is check-then-write, so two creates of one id may both pass."""
        path, taken = self._p(run_id), DetrunError(self._taken(run_id))
        if not self.local:
            if self._exists(path):
                raise taken
            return
        try:
            os.makedirs(self.base, exist_ok=True)
            os.mkdir(path)
        except FileExistsError:
            raise taken from None
        except OSError as exc:
            raise DetrunError(f"{path}: cannot create the run ({exc.strerror or exc})") from None

    def remove_run(self, run_id: str) -> None:
        """Delete the run's folder (manifest, rows, timings); the root's shared blobs stay."""
        path = self._p(check_run_id(run_id))
        if self._exists(path):
            self.fs.delete_dir(path)

    def write_manifest(self, manifest: Manifest) -> None:
        self.write_json(posixpath.join(manifest["run_id"], "manifest.json"), dict(manifest))

    def has_run(self, run_id: str) -> bool:
        return self._exists(self._p(run_id, "manifest.json"))

    def manifest(self, run_id: str) -> Manifest:
        """The run's manifest, its REQUIRED fields checked; none, or one without them, is a DetrunError."""
        path = self._p(run_id, "manifest.json")
        manifest = self.read_json(posixpath.join(run_id, "manifest.json"), "manifest")
        if manifest is None:
            raise DetrunError(f"no run {run_id!r} under {self.root} (no {path})")
        for name, kind in REQUIRED.items():
            value = manifest.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                got = f"a {type(value).__name__}" if name in manifest else "nothing"
                raise DetrunError(f"{path}: manifest field {name!r} must be a {kind.__name__}, got {got}")
        return cast(Manifest, manifest)

    def finish_run(self, run_id: str, status: str, **extra) -> None:
        manifest = self.manifest(run_id)
        manifest["status"], manifest["finished"] = status, datetime.now(timezone.utc).isoformat()
        self.write_manifest(_with(manifest, extra))

    def reopen_run(self, run_id: str, **extra) -> Manifest:
        """Mark an existing run running again (resume), keeping a history of its resumptions."""
        manifest = self.manifest(run_id)
        stamp = datetime.now(timezone.utc).isoformat()
        manifest["status"], manifest["driver"] = RunStatus.RUNNING, driver_record()
        manifest["resumed"] = manifest.get("resumed", []) + [stamp]
        manifest = _with(manifest, extra)
        self.write_manifest(manifest)
        return manifest

    def beat(self, run_id: str) -> None:
        """Refresh the driver's heartbeat in a running run's manifest (heartbeat.py)."""
        manifest = self.manifest(run_id)
        manifest["driver"] = driver_record()
        self.write_manifest(manifest)

    def write_timings(self, run_id: str, shard: str, doc: dict) -> None:
        """Where one shard's seconds went (stages.py); informational, never read by compare."""
        self.write_json(posixpath.join(run_id, "timings", f"{shard}.json"), doc)

    def read_timings(self, run_id: str) -> Dict[str, dict]:
        names = self.list_names(posixpath.join(run_id, "timings"), ".json")  # [] when there is none
        docs = {n[: -len(".json")]: self.read_json(posixpath.join(run_id, "timings", n), "timings") for n in names}
        return {shard: doc for shard, doc in docs.items() if doc is not None}  # None: removed since listed

    def record_submission(self, run_id: str, address: str, submission_id: str) -> None:
        """Remember a Jobs API submission beside the runs (the job may not have written a manifest yet)."""
        record = self.submission(run_id)
        ids = record["submission_ids"] if record is not None else []
        doc = SubmissionRecord(run_id=run_id, address=address, submission_ids=ids + [submission_id])
        self.write_json(posixpath.join(".submissions", f"{run_id}.json"), dict(doc))

    def submission(self, run_id: str) -> Optional[SubmissionRecord]:
        """The Jobs API submissions of a run, or None; an unreadable record is a DetrunError naming it."""
        return cast(Optional[SubmissionRecord],
                    self.read_json(posixpath.join(".submissions", f"{run_id}.json"), "submission record"))

    def list_runs(self) -> List[str]:
        if not self._exists(self.base):
            return []
        sel = pafs.FileSelector(self.base, recursive=False)
        infos = self.fs.get_file_info(sel)
        runs = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
        return sorted(r for r in runs if self._exists(self._p(r, "manifest.json")))
