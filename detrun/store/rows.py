"""A run's rows: one Parquet file per shard (<run_id>/rows/part-<shard>.parquet), written whole; a retried or
resumed shard replaces its file. Its columns are the record's (detrun.record.rows); its digest columns are the
run's references to blobs (blobs.py)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Set

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import DetrunError
from ..record.rows import SCHEMA, rows_table
from .files import Files, guarded


def read_part(fs: pafs.FileSystem, path: str, **options) -> pa.Table:
    """One rows file (pq.read_table's options); one that cannot be read is a DetrunError saying so."""
    try:
        return pq.read_table(path, filesystem=fs, **options)
    except (pa.ArrowException, OSError) as exc:
        raise DetrunError(f"{path}: corrupt or truncated Parquet ({exc})") from None


def read_footer(fs: pafs.FileSystem, path: str) -> None:
    """Check one rows file's Parquet footer (its schema and row groups) without reading its rows; one that
    cannot be read is read_part's DetrunError (a truncated file has no footer)."""
    try:
        pq.read_metadata(path, filesystem=fs)
    except (pa.ArrowException, OSError) as exc:
        raise DetrunError(f"{path}: corrupt or truncated Parquet ({exc})") from None


def rows_dataset(fs: pafs.FileSystem, files: Sequence[str]) -> pads.Dataset:
    """These rows files as one pyarrow dataset, read against SCHEMA."""
    return pads.dataset(list(files), schema=SCHEMA, format="parquet", filesystem=fs)


@guarded
class Rows(Files):
    """The rows files of the runs under a root."""

    def write_rows(self, run_id: str, shard: str, rows: Sequence[dict]) -> str:
        table = rows_table(rows)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        path = self._p(run_id, "rows", f"part-{shard}.parquet")
        self._write_atomic(path, sink.getvalue().to_pybytes())
        return path

    def row_files(self, run_id: str) -> List[str]:
        rows_dir = self._p(run_id, "rows")
        if not self._exists(rows_dir):
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(rows_dir))
        return sorted(i.path for i in infos if i.path.endswith(".parquet"))

    def shard_keys(self, run_id: str, shard: str) -> Optional[set]:
        """The keys stored for one shard; None when its part file is missing or unreadable."""
        path = self._p(run_id, "rows", f"part-{shard}.parquet")
        if not self._exists(path):
            return None
        try:
            return set(read_part(self.fs, path, columns=["key"]).column("key").to_pylist())
        except DetrunError:
            return None  # a resume rewrites it

    def blob_refs(self, run_id: str) -> Set[str]:
        """The digests a run's rows reference (its claim on the shared blobs; rows hold them per shard)."""
        table = rows_dataset(self.fs, self.row_files(run_id)).to_table(columns=["out_digest", "lse_digest"])
        return {d for column in table.columns for d in column.to_pylist() if d}
