"""Tensor blobs by digest: the raw bytes of a tensor, one copy per digest for every run under the root
(blobs/<digest[:2]>/<digest>.bin); runs written before blobs were shared keep their own (<run_id>/blobs/,
still read). A run's rows name the digests it uses (rows.py)."""

from __future__ import annotations

import re
from typing import Dict, Iterable, Optional

import pyarrow.fs as pafs

from .files import Files, guarded

DIGEST = re.compile(r"[0-9a-f]{8,128}")


@guarded
class Blobs(Files):
    """The blobs under a root."""

    def _blob(self, digest: str) -> str:
        if not DIGEST.fullmatch(digest):
            raise ValueError(f"not a digest: {digest!r}")
        return self._p("blobs", digest[:2], f"{digest}.bin")

    def write_blobs(self, blobs: Dict[str, bytes]) -> int:
        """Store each tensor's bytes once for all runs: a digest already there (with as many bytes) is
        skipped. Returns how many were written. Writers of one digest at once write the same bytes,
        each whole (_write_atomic), so whichever lands last leaves the same file."""
        written = 0
        for digest, data in blobs.items():
            path = self._blob(digest)
            info = self.fs.get_file_info(path)
            if info.type != pafs.FileType.File or info.size != len(data):
                self._write_atomic(path, data)
                written += 1
        return written

    def read_blob(self, run_ids: Iterable[str], digest: str) -> Optional[bytes]:
        """A tensor's bytes: from the root's shared blobs, else from a run's own (older runs); None if absent."""
        if not DIGEST.fullmatch(digest):  # a row names it: never a path outside the blobs
            return None
        for path in [self._blob(digest)] + [self._p(r, "blobs", f"{digest}.bin") for r in run_ids]:
            if self._exists(path):
                with self.fs.open_input_stream(path) as f:
                    return f.read()
        return None

    def blob_home(self, run_ids: Iterable[str] = ()) -> str:
        """Where read_blob looks for a digest's bytes, for messages: the root's blobs folder."""
        return self.where("blobs")
