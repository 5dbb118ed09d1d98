"""The rows of a run set as integer codes, read per Parquet file: what compare and history group on.

Strings are read dictionary-encoded (Parquet stores them so), unified across files and kept as
int32 codes; the kernel audit runs per file while the kernel lists are in memory and is then
dropped. Whole rows are only built (rows_at) for the few rows a verdict needs to explain.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import DetrunError
from ..record.fingerprint import FINGERPRINT_FIELDS
from ..record.manifest import Manifest
from ..record.rows import ADDED, SCHEMA, with_added
from ..record.status import Status
from ..store.rows import read_part
from ..store.runs import RunReader
from .audit import audit_kernels, is_flashinfer_kernel, is_torch_attn

_ENV = tuple(f for f in FINGERPRINT_FIELDS if f not in ("sm_count",))
INTS = ("repeat", "slot", "sm_count")
STRINGS = ("run_id", "case", "request", "mode", "phase", "status", "reason", "backend", "attn", "path", "plan",
           "out_digest", "lse_digest", "fingerprint", "version", *_ENV)
# Coded too, but read on first use: only a run set with a decode phase compares them (compare.py).
LAZY = ("last_out_digest", "last_lse_digest")
_DICT = pa.dictionary(pa.int32(), pa.string())
DETAIL = tuple(n for n in SCHEMA.names if n != "kernels")  # what explaining a row needs
DETAIL_BYTES = 256 << 20  # DETAIL tables kept for rows_at (~600 bytes a row): the files of a sweep-sized run


def _read(store: RunReader, path: str, columns: Sequence[str], dictionary: Sequence[str] = ()) -> pa.Table:
    """Some columns of one file, dictionary-encoded where asked; a file written before a column was
    added (record.rows.ADDED) gets it with the value such rows have (phase "prefill", last digests null)."""
    try:
        return read_part(store.fs, path, columns=list(columns), read_dictionary=list(dictionary))
    except DetrunError as exc:
        error = DetrunError(str(exc))  # not exc: its traceback and context hold this frame (and the table read
        # below) in a reference cycle, kept until the garbage collector runs: a file's table per old file read
    try:
        names = set(pq.read_schema(path, filesystem=store.fs).names)
    except (pa.ArrowException, OSError):
        raise error from None
    missing = [c for c in columns if c not in names]
    if not missing or set(missing) - set(ADDED):
        raise error from None
    present = [c for c in columns if c in names]
    table = with_added(_read(store, path, present, [d for d in dictionary if d.split(".")[0] in names]), missing)
    return table.select(list(columns))


def _as_codes(table: pa.Table) -> pa.Table:
    """Coded string columns as dictionaries (a file without dictionary pages reads them plain; nulls,
    the last digests of rows stored before they were added, as "")."""
    for i, f in enumerate(table.schema):
        if f.type == pa.string() and f.name in STRINGS + LAZY:
            column = table.column(i)
            column = pc.fill_null(column, "") if column.null_count else column
            table = table.set_column(i, f.name, pc.dictionary_encode(column).cast(_DICT))
    return table


def _labelled(table: pa.Table, label: str) -> pa.Table:
    """The run_id column as the run was named when read (a renamed or same-id run keeps its own name)."""
    i = table.schema.get_field_index("run_id")
    column = table.column(i)
    if all(c.dictionary.to_pylist() == [label] for c in column.chunks if len(c)):
        return table
    ids = pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(table), dtype=np.int32)), pa.array([label]))
    return table.set_column(i, "run_id", ids)


def _audit(table: pa.Table, start: int, cache: Dict[tuple, Optional[str]],
           profiled: np.ndarray) -> List[Tuple[int, str]]:
    """(row index, problem) for the ok rows of one file whose kernels contradict their path; marks in
    `profiled` (this file's slice) the ok rows that recorded flashinfer kernels, or torch rows (sdpa, flex) any
    kernels (the audited ones).
    Kernel names are dictionary codes: each distinct (path, kernel list) is audited once."""
    kernels = table.column("kernels").combine_chunks()
    flat = kernels.flatten()
    if not len(flat):
        return []
    names = flat.dictionary.to_pylist()
    codes = flat.indices.to_numpy()
    hit = np.zeros(len(kernels), dtype=bool)
    hit[pc.list_parent_indices(kernels).to_numpy()[np.array([is_flashinfer_kernel(k) for k in names])[codes]]] = True
    attn = table.column("attn").combine_chunks()
    torch_codes = [c for c, a in enumerate(attn.dictionary.to_pylist()) if is_torch_attn(a)]
    if torch_codes:  # torch rows (sdpa, flex) with kernels recorded: audited against the kernel they pinned
        hit |= np.isin(attn.indices.to_numpy(), torch_codes) & (pc.list_value_length(kernels).to_numpy() > 0)
    status = table.column("status").combine_chunks()
    hit &= pc.equal(status.cast(pa.string()), Status.OK.value).to_numpy(zero_copy_only=False)
    profiled[:] = hit
    rows = np.flatnonzero(hit)
    if not len(rows):
        return []
    path = table.column("path").combine_chunks()
    offsets = kernels.offsets.to_numpy()
    first, length = offsets[rows] - offsets[0], np.diff(offsets)[rows]
    parts = [path.indices.to_numpy()[rows], attn.indices.to_numpy()[rows], length]
    parts += [np.where(length > j, codes[np.minimum(first + j, len(codes) - 1)], -1) for j in range(int(length.max()))]
    combo, _ = combine(parts)
    uniq, at, inverse = np.unique(combo, return_index=True, return_inverse=True)
    problems = []
    for r in rows[at]:
        f, n = int(offsets[r] - offsets[0]), int(offsets[r + 1] - offsets[r])
        seen = (path.dictionary[path.indices[r].as_py()].as_py(), tuple(names[c] for c in codes[f:f + n]),
                attn.dictionary[attn.indices[r].as_py()].as_py())
        if seen not in cache:
            cache[seen] = audit_kernels(*seen)
        problems.append(cache[seen])
    bad = np.array([p is not None for p in problems])[inverse.ravel()]
    return [(start + int(r), problems[k]) for r, k in zip(rows[bad], inverse.ravel()[bad])]


def _decoded(column: pa.ChunkedArray) -> list:
    """A column's values as Python objects, a dictionary column decoded once (not per value)."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column.to_pylist()


class _Row(dict):
    def __init__(self, cols: "Columns", index: int, fields: Iterable[Tuple[str, object]]):
        super().__init__(fields)
        self.cols, self.index = cols, index

    def __missing__(self, name: str):
        if name not in DETAIL:
            raise KeyError(name)
        self.update(self.cols.rows_at([self.index])[self.index])
        return self[name]


@dataclass
class Columns:
    """Rows of runs (in run order, files sorted, rows in file order), as codes (keys as strings);
    a row's index is its place in that order."""

    store: RunReader
    runs: List[str]
    manifests: Dict[str, Manifest]  # each run's, read once
    files: List[str]
    starts: np.ndarray  # row index where each file starts; last entry: total rows
    run_files: Dict[str, Tuple[int, int]]  # run -> its files [lo, hi)
    table: pa.Table
    audit: List[Tuple[int, str]] = field(default_factory=list)
    profiled: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # ok rows with kernels
    _codes: Dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _details: "OrderedDict[int, pa.Table]" = field(default_factory=OrderedDict, repr=False)  # file -> DETAIL

    @property
    def n(self) -> int:
        return int(self.starts[-1])

    def codes(self, column: str) -> np.ndarray:
        """int codes of a column (indices into dictionary(column) for strings), in read order."""
        if column not in self._codes:
            if column in LAZY and column not in self.table.column_names:
                self._load(column)
            self._codes[column] = self._read_codes(column)
        return self._codes[column]

    def _load(self, column: str) -> None:
        """A LAZY column of every file, read now (dictionaries unified across files)."""
        parts = [_as_codes(_read(self.store, path, [column], [column])) for path in self.files]
        empty = pa.table({column: pa.array([], _DICT)})
        values = pa.concat_tables(parts).unify_dictionaries().column(0) if parts else empty.column(0)
        self.table = self.table.append_column(column, values)

    def _read_codes(self, column: str) -> np.ndarray:
        """A column of one value is a read-only broadcast (no memory); any other is combined into one
        Arrow chunk, which the codes then view (held once, not twice)."""
        i = self.table.schema.get_field_index(column)
        arr = self.table.column(i)
        views = [(c.indices if pa.types.is_dictionary(arr.type) else c).to_numpy() for c in arr.chunks]
        if not views:
            return np.zeros(0, np.int32)
        full = [v for v in views if len(v)]
        if full and all(int(v.min()) == int(v.max()) == int(full[0][0]) for v in full):
            return np.broadcast_to(full[0][:1], (len(self.table),))
        if arr.num_chunks > 1:
            arr = pa.chunked_array([arr.combine_chunks()], arr.type)
            self.table = self.table.set_column(i, self.table.schema.field(i), arr)
        chunk = arr.chunk(0)
        return (chunk.indices if pa.types.is_dictionary(arr.type) else chunk).to_numpy()

    def dictionary(self, column: str) -> List[str]:
        arr = self.table.column(column)
        return arr.chunk(0).dictionary.to_pylist() if arr.num_chunks else []

    def code_of(self, column: str, value: str) -> int:
        """A string's code in a coded column (its place in dictionary(column)); -1 when no row has it."""
        names = self.dictionary(column)
        return names.index(value) if value in names else -1

    def ok_rows(self) -> np.ndarray:
        """The read indices of the rows whose status is ok, in read order."""
        return np.flatnonzero(self.codes("status") == self.code_of("status", Status.OK))

    def rows_in_memory(self, idx: np.ndarray) -> Dict[int, dict]:
        """Rows as dicts from the columns read; any other field is read from its file when asked."""
        out: Dict[int, dict] = {}
        names = self.table.column_names
        for f, local in self._by_file(idx):  # one chunk per file: take within it, never across
            chunk = self.table.slice(int(self.starts[f]), int(self.starts[f + 1] - self.starts[f]))
            taken = chunk.take(pa.array(local - self.starts[f]))
            columns = [_decoded(taken.column(i)) for i in range(taken.num_columns)]
            out.update((int(i), _Row(self, int(i), zip(names, r))) for i, r in zip(local, zip(*columns)))
        return out

    def _by_file(self, wanted: Union[Sequence[int], np.ndarray]):
        idx = np.unique(np.asarray(wanted, dtype=np.int64))
        where = np.searchsorted(self.starts, idx, side="right") - 1
        for f in np.unique(where):
            yield int(f), idx[where == f]

    def rows_at(self, idx: Union[Sequence[int], np.ndarray]) -> Dict[int, dict]:
        """The rows at these read-order indices as dicts (every field but the kernel list)."""
        out: Dict[int, dict] = {}
        for f, local in self._by_file(idx):
            rows = self._detail(f).take(local - self.starts[f]).to_pylist()
            label = next(run for run, (lo, hi) in self.run_files.items() if lo <= f < hi)
            for row in rows:
                row["run_id"] = label
            out.update(zip(local.tolist(), rows))
        return out

    def _detail(self, f: int) -> pa.Table:
        """File f's DETAIL columns, kept: a file is read once while the tables asked for fit in DETAIL_BYTES
        (past it, the least recently asked for are let go; the last one is always kept)."""
        if f in self._details:
            self._details.move_to_end(f)
            return self._details[f]
        self._details[f] = table = _read(self.store, self.files[f], DETAIL)
        while len(self._details) > 1 and sum(t.nbytes for t in self._details.values()) > DETAIL_BYTES:
            self._details.popitem(last=False)
        return table

    def row_range(self, run_id: str) -> Tuple[int, int]:
        lo, hi = self.run_files[run_id]
        return int(self.starts[lo]), int(self.starts[hi])

    def keys(self, run_id: str) -> pa.ChunkedArray:
        a, b = self.row_range(run_id)
        return self.table.column("key").slice(a, b - a)

    def only(self, run_id: str) -> "Columns":
        """The rows of one of the runs (a slice: codes keep their dictionaries, and view this one's)."""
        lo, hi = self.run_files[run_id]
        a, b = self.row_range(run_id)
        for column in INTS + STRINGS:
            self.codes(column)
        return Columns(self.store, [run_id], {run_id: self.manifests[run_id]}, self.files[lo:hi],
                       self.starts[lo:hi + 1] - a,
                       {run_id: (0, hi - lo)}, self.table.slice(a, b - a),
                       [(i - a, p) for i, p in self.audit if a <= i < b], self.profiled[a:b],
                       {c: v[a:b] for c, v in self._codes.items()})


def read_columns(store: RunReader, runs: Sequence[str], damaged: Optional[Dict[str, str]] = None,
                 manifests: Optional[Mapping[str, Manifest]] = None) -> Columns:
    """The runs' rows as codes, with their manifests (those given, else read here). With `damaged`, a run
    whose manifest or a Parquet file cannot be read is left out and recorded there (run -> reason) instead
    of failing the whole read."""
    read: Dict[str, Manifest] = {}
    files: List[str] = []
    run_files: Dict[str, Tuple[int, int]] = {}
    tables: List[pa.Table] = []
    audit: List[Tuple[int, str]] = []
    cache: Dict[tuple, Optional[str]] = {}
    profiled: List[np.ndarray] = []
    starts, kept = [0], []
    for run_id in runs:
        mark = (len(files), len(tables), len(audit), len(profiled), len(starts))
        try:
            read[run_id] = (manifests or {}).get(run_id) or store.manifest(run_id)
            for path in store.row_files(run_id):
                table = _read(store, path, INTS + STRINGS + ("key", "kernels"), STRINGS + ("kernels.list.element",))
                profiled.append(np.zeros(len(table), dtype=bool))
                audit += _audit(table, starts[-1], cache, profiled[-1])
                tables.append(_labelled(_as_codes(table.drop_columns(["kernels"])), run_id))
                files.append(path)
                starts.append(starts[-1] + len(table))
        except DetrunError as exc:
            if damaged is None:
                raise
            damaged[run_id] = str(exc)
            del files[mark[0]:], tables[mark[1]:], audit[mark[2]:], profiled[mark[3]:], starts[mark[4]:]
            continue
        run_files[run_id] = (mark[0], len(files))
        kept.append(run_id)
    if tables:
        table = pa.concat_tables(tables).unify_dictionaries()
    else:
        table = _as_codes(SCHEMA.empty_table().select(INTS + STRINGS + ("key",)))
    return Columns(store, kept, {r: read[r] for r in kept}, files, np.asarray(starts, dtype=np.int64), run_files,
                   table, audit, np.concatenate(profiled) if profiled else np.zeros(0, dtype=bool))


def densify(code: np.ndarray) -> np.ndarray:
    """Dense int64 codes 0..k-1 for the distinct values of code (hashing, not sorting)."""
    return pc.dictionary_encode(pa.array(code)).indices.to_numpy().astype(np.int64)


def mixed_radix(parts: Sequence[np.ndarray], radices: Sequence[int]) -> np.ndarray:
    """One code per row from digits of known radices (part i in [0, radices[i]); the first part is the most
    significant): the code's place in the product of the radices, so a table of every combination in that
    order is indexed by it. int32 where the product fits, else int64; a digit out of range (a -1 marking
    "none") gives a meaningless code the caller masks. The arithmetic is in place on one new array."""
    wide = int(np.prod([max(1, int(r)) for r in radices], dtype=object)) >= 1 << 31
    code = parts[0].astype(np.int64 if wide else np.int32)
    for part, radix in zip(parts[1:], radices[1:]):
        np.multiply(code, radix, out=code)
        np.add(code, part, out=code)
    return code


def combine(parts: Sequence[np.ndarray], bound: Optional[int] = None) -> Tuple[np.ndarray, int]:
    """One int64 code per row, equal exactly where every part is equal, and an upper bound of the
    codes (mixed radix of each part's range, not known beforehand: see mixed_radix for known radices; made
    dense by hashing when the bound would pass `bound` or int64).
    Constant parts (one value) add nothing and are skipped; the arithmetic is in place."""
    n = len(parts[0]) if parts else 0
    limit = min(bound or 1 << 62, 1 << 62)
    code, size = None, 1
    if not n:
        return np.zeros(0, dtype=np.int64), 1
    for part in parts:
        low, high = int(part.min()), int(part.max())
        radix = high - low + 1
        if radix == 1:
            continue
        if code is None:
            code = part.astype(np.int64)  # a copy: the caller's array is never written
            if low:
                code -= low
            size = radix
            continue
        if size * radix > limit:
            code = densify(code)
            size = int(code.max()) + 1
        code *= radix
        code += part
        if low:
            code -= low
        size *= radix
    if code is None:
        return np.zeros(n, dtype=np.int64), 1
    if size > limit:
        code = densify(code)
        size = int(code.max()) + 1
    return code, size
