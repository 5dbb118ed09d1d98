"""A row: one request of one cell, as a task records it and a run stores it (one Parquet row).

Row is the one declaration of the columns: their names, order and types; SCHEMA (Arrow) is read from it
(Int32 marks the int32 columns; a plain int is int64). A row stored before a column was added reads with
ADDED's value there (with_added, as_stored): the migration of old rows.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Dict, Iterable, List, Optional, TypedDict, cast

import pyarrow as pa
import pyarrow.compute as pc

from .status import Status

Int32 = Annotated[int, pa.int32()]


class Row(TypedDict):
    """Every column of a stored row, in SCHEMA's order."""

    run_id: str
    key: str  # keys.row_key
    case: str
    request: str  # keys: a copy is name#i
    mode: str
    phase: str  # prefill | decode | dllm
    repeat: Int32
    slot: Int32
    shard: str
    status: str  # a Status value
    reason: str
    backend: str
    attn: str
    path: str  # paths.PATH_*
    use_paged: bool
    out_digest: str
    out_dtype: str
    out_shape: List[int]
    lse_digest: str
    lse_dtype: str
    lse_shape: List[int]
    last_out_digest: Optional[str]  # the request's last query row alone (decode: out_digest itself)
    last_lse_digest: Optional[str]
    plan: str  # JSON (plans.py)
    kernels: List[str]
    wiring: str  # JSON, backend sglang: what SGLang planned and ran (judge/wiring.py); else ""
    ref_error: str  # JSON {"reference": "fp64-cpu"|"fp32", "out": {"max_abs", "max_rel", "max_ulp"}, "lse": {...}} or ""
    plan_ms: float
    run_ms: float
    flags: str  # JSON, as the task saw them
    knobs: str  # JSON: the SGLang profile and every effective FlashInfer knob (spec/sglang.py)
    host: str
    node_id: str
    gpu_name: str
    gpu_uuid: str
    sm_count: Int32
    driver: str
    cuda: str
    torch: str
    flashinfer: str
    sglang: str  # backend sglang: the SGLang version whose code ran ("" for other backends)
    version: str  # the job's versions: environment this row ran in ("" without versions:)
    ray: str
    python: str
    fingerprint: str  # fingerprint.py
    pid: int
    attempt: Int32


RowFields = Dict[str, Any]  # a row as a task or the driver builds it: some of Row's columns (make_row fills the rest)
_ARROW = ((str, pa.string()), (bool, pa.bool_()), (int, pa.int64()), (float, pa.float64()),
          (List[int], pa.list_(pa.int64())), (List[str], pa.list_(pa.string())))


def _arrow(hint: object) -> pa.DataType:
    """The Arrow type of one Row annotation (Optional[X]: X's, nullable as every column is)."""
    if typing.get_origin(hint) is Annotated:
        return typing.get_args(hint)[1]
    if typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return next(arrow for kind, arrow in _ARROW if kind == hint)


SCHEMA = pa.schema([(name, _arrow(hint)) for name, hint in typing.get_type_hints(Row, include_extras=True).items()])
STATUSES = tuple(s.value for s in Status)  # the stored strings
_DEFAULTS = {pa.string(): "", pa.int32(): 0, pa.int64(): 0, pa.float64(): 0.0, pa.bool_(): False}
# Columns added to SCHEMA later, and what a row stored before has there (None: null).
ADDED: Dict[str, object] = {"phase": "prefill", "last_out_digest": None, "last_lse_digest": None, "sglang": "",
                            "wiring": "", "version": "", "ref_error": ""}


def with_added(table: pa.Table, names: Iterable[str]) -> pa.Table:
    """Rows stored before a column was added: the column with ADDED's value (phase "prefill", digests null)."""
    for name in names:
        field = SCHEMA.field(name)
        table = table.append_column(field, pa.repeat(pa.scalar(ADDED[name], field.type), len(table)))
    return table


def as_stored(table: pa.Table) -> pa.Table:
    """A table read with SCHEMA (absent columns null) with ADDED's values where a file lacked a column."""
    i = table.schema.get_field_index("phase")
    if i < 0 or not table.column(i).null_count:
        return table
    return table.set_column(i, "phase", pc.fill_null(table.column(i), ADDED["phase"]))


_NAME_SET = frozenset(SCHEMA.names)
_LISTS = tuple(f.name for f in SCHEMA if pa.types.is_list(f.type))  # a new [] in each row
# Every column's default in SCHEMA's order (lists: None here, a new [] per row): a row starts as a copy of it.
_FILL = {f.name: None if f.name in _LISTS else ADDED.get(f.name) or _DEFAULTS[f.type] for f in SCHEMA}


def _checked(fields: typing.Mapping[str, Any]) -> str:
    """The row's status as stored (a plain str; unset: ok); unknown fields or another status are an error."""
    unknown = fields.keys() - _NAME_SET
    if unknown:
        raise KeyError(f"not in the row schema: {sorted(unknown)}")
    status = fields.get("status", Status.OK)
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}")
    return Status(status).value  # a plain str: rows cross Ray as plain values


def make_row(**fields) -> Row:
    """Build one row against SCHEMA: unknown fields are an error, missing ones get defaults."""
    status = _checked(fields)
    row = dict(_FILL)
    row.update(fields)  # the keys are SCHEMA's: the order stays SCHEMA's
    for name in _LISTS:
        if name not in fields:
            row[name] = []
    row["status"] = status
    return cast(Row, row)


def rows_table(rows: typing.Sequence[typing.Mapping[str, Any]]) -> pa.Table:
    """Rows as make_row builds each, as one table against SCHEMA, built column by column (the driver's write of a
    shard's rows: two thirds of the time of a table from make_row's dicts, bench/sweep_rows.py)."""
    statuses = [_checked(r) for r in rows]
    columns: Dict[str, list] = {}
    for name in SCHEMA.names:
        if name == "status":
            columns[name] = statuses
        elif name in _LISTS:
            columns[name] = [r[name] if name in r else [] for r in rows]
        else:
            default = _FILL[name]
            columns[name] = [r.get(name, default) for r in rows]
    return pa.Table.from_pydict(columns, schema=SCHEMA)
