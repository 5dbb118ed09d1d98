"""The runs under one root: RunStore, made of what each part of the root owns (files.py: file access and
whole-or-nothing writes; manifests.py: run ids, manifests, timings, submissions; rows.py: the rows files;
blobs.py: tensor bytes by digest), and RunReader, the reading it shares with RunSet (runset.py).

Layout under the runs root (a local path or any pyarrow.fs URI, e.g. s3://bucket/runs):
  <run_id>/manifest.json              the spec it ran, GPU slots, status, created and finished, the driver's
                                      heartbeat, failures, resumptions, the driver's timings
  <run_id>/rows/part-<shard>.parquet  one file per shard, written whole; a retried or resumed shard replaces
                                      its file. Its digest columns are the run's references to blobs
  <run_id>/timings/<shard>.json       where the shard's seconds went (stages.py); compare never reads it
  blobs/<digest[:2]>/<digest>.bin     raw bytes of a tensor, one copy per digest for every run
  <run_id>/blobs/<digest>.bin         the same, in runs written before blobs were shared (still read)
  baselines/<spec>/<fingerprint>.json the golden run of one environment fingerprint (judge/baseline.py)
  jit-cache/<flashinfer>/<cuda>/<arch>/<module>.tar  FlashInfer's compiled modules (run/jitcache.py)
  .submissions/<run_id>.json          the Ray Jobs API submissions of a run (`submit --address http://...`)
Verdicts and history (judge/compare.py, judge/history.py) are computed from the rows and manifests when
asked; they are not stored.
"""

from __future__ import annotations

import abc
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from ..errors import DetrunError
from ..record.manifest import Manifest
from ..record.rows import SCHEMA, as_stored
from .blobs import Blobs
from .files import guarded
from .manifests import Manifests
from .requests import RunsRequest
from .rows import Rows, read_footer, read_part, rows_dataset


class RunReader(abc.ABC):
    """What reading runs needs, wherever they are: RunStore (the runs under one root) and RunSet (runset.py:
    run directories from several places) both implement it, and the judge and the presenters take it. A run
    is named by its label: its id under one root, or the name a RunSet gave it."""

    root: str  # where the runs are, for messages
    fs: pafs.FileSystem  # where row_files are read

    @abc.abstractmethod
    def manifest(self, run_id: str) -> Manifest:
        """The run's manifest (its REQUIRED fields checked; run_id its label); none is a DetrunError."""

    @abc.abstractmethod
    def has_run(self, run_id: str) -> bool: ...

    @abc.abstractmethod
    def row_files(self, run_id: str) -> List[str]:
        """The run's Parquet files, sorted (paths on fs)."""

    @abc.abstractmethod
    def read_rows(self, run_ids: Iterable[str]) -> pa.Table:
        """Every row of these runs, against SCHEMA (rows stored before a column was added migrated)."""

    @abc.abstractmethod
    def dataset(self, run_ids: Optional[Sequence[str]] = None) -> pads.Dataset:
        """The rows of these runs (default: every run) as one pyarrow dataset."""

    @abc.abstractmethod
    def read_blob(self, run_ids: Iterable[str], digest: str) -> Optional[bytes]:
        """A tensor's bytes, as one of these runs stored it; None if absent."""

    @abc.abstractmethod
    def blob_home(self, run_ids: Iterable[str] = ()) -> str:
        """Where read_blob looks for these runs' blobs, for messages."""

    @abc.abstractmethod
    def runs_root(self, needs: str) -> RunStore:
        """The one runs root these runs are under, for what takes more than reading them (`needs`: e.g.
        --baseline, whose documents live under a root); runs from several places have none: DetrunError."""


@guarded
class RunStore(Manifests, Rows, Blobs, RunReader):
    """A runs root: create runs, write shards and blobs atomically, read them back. A storage error
    (wrong credentials, a missing bucket, a full disk) is one DetrunError naming the root."""

    def read_rows(self, run_ids: Iterable[str]) -> pa.Table:
        tables = []
        for run_id in run_ids:
            self.manifest(run_id)
            tables += [read_part(self.fs, path, schema=SCHEMA) for path in self.row_files(run_id)]
        return as_stored(pa.concat_tables(tables)) if tables else SCHEMA.empty_table()

    def dataset(self, run_ids: Optional[Sequence[str]] = None) -> pads.Dataset:
        """The rows of these runs (default: every run under the root) as one pyarrow dataset."""
        runs = self.list_runs() if run_ids is None else run_ids
        return rows_dataset(self.fs, [f for run_id in runs for f in self.row_files(run_id)])

    def damage(self, run_id: str) -> str:
        """Why the run cannot be read ("" when it can): its manifest, or a rows file whose Parquet footer is
        not whole. What list and history call damaged (history also finds damage deeper in the rows it reads)."""
        try:
            self.manifest(run_id)
            for path in self.row_files(run_id):
                read_footer(self.fs, path)
        except DetrunError as exc:
            return str(exc)
        return ""

    def runs_root(self, needs: str) -> RunStore:
        return self


def runs_under(req: RunsRequest) -> Iterator[Tuple[str, Union[Manifest, DetrunError]]]:
    """detrun list: each run under req.runs_root with its manifest, or why it is damaged (RunStore.damage)."""
    store = RunStore(req.runs_root)
    for run_id in store.list_runs():
        damage = store.damage(run_id)
        yield run_id, DetrunError(damage) if damage else store.manifest(run_id)
