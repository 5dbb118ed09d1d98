"""Runs named on the command line, each read where it was found: ids under one root, or run directories
from several roots (renamed, or sharing an id). run_dirs reads exactly the runs given."""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from ..errors import DetrunError
from ..record.manifest import Manifest
from ..record.rows import as_stored
from .rows import rows_dataset
from .runs import RunReader, RunStore


class RunSet(RunReader):
    """Runs named on the command line, each read from where it was found (ids under one root, or run
    directories from several roots, renamed or sharing an id): label -> (store, directory name).
    Reads only (it has no runs root: runs_root says so); the label is the run's name in every verdict."""

    def __init__(self, refs: Dict[str, Tuple[RunStore, str]]):
        self.refs = refs
        self.root = ", ".join(sorted({store.root for store, _ in refs.values()}))
        self.fs = next(iter(refs.values()))[0].fs if refs else pafs.LocalFileSystem()

    def manifest(self, run_id: str) -> Manifest:
        label = run_id
        store, name = self.refs[label]
        manifest = store.manifest(name)
        manifest["run_id"] = label
        return manifest

    def has_run(self, run_id: str) -> bool:
        label = run_id
        return label in self.refs and self.refs[label][0].has_run(self.refs[label][1])

    def row_files(self, run_id: str) -> List[str]:
        store, name = self.refs[run_id]
        return store.row_files(name)

    def read_blob(self, run_ids: Iterable[str], digest: str) -> Optional[bytes]:
        for label in run_ids:
            store, name = self.refs[label]
            found = store.read_blob([name], digest)
            if found is not None:
                return found
        return None

    def blob_home(self, run_ids: Iterable[str] = ()) -> str:
        return ", ".join(dict.fromkeys(self.refs[label][0].blob_home() for label in run_ids)) or self.root

    def dataset(self, run_ids: Optional[Sequence[str]] = None) -> pads.Dataset:
        files = [f for label in (run_ids if run_ids is not None else self.refs) for f in self.row_files(label)]
        return rows_dataset(self.fs, files)

    def read_rows(self, run_ids: Iterable[str]) -> pa.Table:
        return as_stored(self.dataset(list(run_ids)).to_table())

    def runs_root(self, needs: str) -> RunStore:
        raise DetrunError(f"runs from several places ({self.root}) can only be compared, not used for {needs}; "
                          "pass run ids under one --runs-root")


def run_dirs(root: str, run_ids: Sequence[str]) -> Tuple[RunReader, List[str]]:
    """Read exactly the runs given: ids under root, or paths of run directories (each read where it is).
    Returns (a RunStore or, when runs come from elsewhere, a RunSet; the labels to compare)."""
    refs: Dict[str, Tuple[RunStore, str]] = {}
    given: List[Tuple[str, RunStore, str]] = []
    for rid in run_ids:
        if ("/" in rid or os.sep in rid) and os.path.isfile(os.path.join(rid, "manifest.json")):
            parent, name = os.path.split(os.path.abspath(rid.rstrip("/").rstrip(os.sep)))
            given.append((rid, RunStore(parent), name))
        else:
            given.append((rid, RunStore(root), rid))
    places = [(store.base, name) for _, store, name in given]
    twice = sorted({f"{b}/{n}" for b, n in places if places.count((b, n)) > 1})
    if twice:
        raise DetrunError(f"the same run is given twice: {', '.join(twice)} (compare a run with itself across "
                          "repeats by giving it once)")
    names = [name for _, _, name in given]
    for rid, store, name in given:
        refs[name if names.count(name) == 1 else rid.rstrip("/")] = (store, name)
    labels = list(refs)
    stores = {store.base for store, _ in refs.values()}
    if len(stores) == 1 and all(label == name for label, (_, name) in refs.items()):
        return next(iter(refs.values()))[0], labels
    return RunSet(refs), labels


