"""A mismatch's numbers (diffstats) from the two rows' stored tensors, read once per digest; or why there are
none (the run stores no tensors, a blob is missing, the shapes differ)."""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

from ..record.manifest import Manifest
from ..store.runs import RunReader
from .diffstats import diff_stats
from .tolerance import Numbers


def ident(r: dict, last: bool = False) -> Tuple[str, str]:
    """The digests two rows must share: the whole output and LSE, or (last) their last query token's."""
    pre = "last_" if last else ""
    return r[f"{pre}out_digest"], r[f"{pre}lse_digest"]


_CACHED = 256 << 20  # bytes of blobs kept between the pairs of a group (a bound claim compares each with each)


class Blobs:
    """The compared runs' stored tensors, for the numbers of the pairs that differ (stats)."""

    def __init__(self, store: RunReader, runs: Sequence[str], manifests: Dict[str, Manifest]):
        self.store, self.runs, self.manifests = store, list(runs), manifests
        self._raw: Dict[str, Optional[bytes]] = {}
        self._held = 0  # bytes in _raw
        self._stats: Dict[tuple, Numbers] = {}

    def _read(self, digest: str) -> Optional[bytes]:
        if digest not in self._raw:
            if self._held > _CACHED:
                self._raw.clear()
                self._held = 0
            self._raw[digest] = raw = self.store.read_blob(self.runs, digest)
            self._held += len(raw or b"")
        return self._raw[digest]

    def _tensor(self, r: dict, which: str, last: bool) -> Tuple[Optional[bytes], list]:
        """A row's stored bytes and shape; with last, only its last row (the last query token)."""
        raw, shape = self._read(r[f"{which}_digest"]), list(r[f"{which}_shape"] or [])
        if raw is None or not last or not shape or not shape[0]:
            return raw, shape
        return raw[len(raw) - len(raw) // shape[0]:], [1, *shape[1:]]

    def _absent(self, r: dict, which: str) -> str:
        """Why a row's tensor has no bytes: its run stores none, or the blob of its digest is missing."""
        spec = self.manifests[r["run_id"]]["spec"]
        if spec.get("store_tensors", True) is False:
            return f"run {r['run_id']} stores no tensors (store_tensors: false)"
        return f"blob {r[f'{which}_digest'] or '(no digest)'} missing under {self.store.blob_home([r['run_id']])}"

    def stats(self, a: dict, b: dict, which: str, last: bool = False) -> Numbers:
        """The two rows' diff numbers; None when their digests are equal; else why there are no numbers.
        Asked again for the same two tensors, the first answer."""
        one, other = ident(a, last)[which == "lse"], ident(b, last)[which == "lse"]
        if one == other:
            return None
        key = (a[f"{which}_digest"], b[f"{which}_digest"], which, last)
        if key not in self._stats:
            self._stats[key] = self._numbers(a, b, which, last)
        return self._stats[key]

    def _numbers(self, a: dict, b: dict, which: str, last: bool) -> Numbers:
        (raw_a, shape_a), (raw_b, shape_b) = self._tensor(a, which, last), self._tensor(b, which, last)
        if raw_a is None or raw_b is None:
            absent = [self._absent(r, which) for r, raw in ((a, raw_a), (b, raw_b)) if raw is None]
            return f"no numbers: {'; '.join(dict.fromkeys(absent))}"
        if shape_a != shape_b:
            return f"no numbers: shapes differ ({shape_a} vs {shape_b})"
        try:
            return diff_stats(raw_a, raw_b, a[f"{which}_dtype"], shape_a)
        except ValueError as exc:  # a blob whose bytes do not fit its dtype and shape
            return f"no numbers: {exc}"
