"""Small specs and run helpers shared by the tests (tiny shapes: CPU seconds, not minutes)."""

from __future__ import annotations

import copy

import pyarrow.parquet as pq
import pytest
import torch

from detrun.run import inline
from detrun.kernels.digest import tensor_digest
from detrun.spec.model import spec_from_dict
from detrun.store.runs import RunStore

SMALL = {
    "name": "small",
    "backend": "reference",
    "env": {"SGLANG_FLASHINFER_USE_PAGED": "1"},
    "modes": ["eager", "cudagraph"],
    "dtype": "bf16",
    "heads": {"qo": 4, "kv": 2},
    "head_dim": 32,
    "page_size": 4,
    "seed": 7,
    "repeats": 2,
    "requests": {
        "target": {"qo_len": 21},
        "target_p": {"qo_len": 10, "prefix_len": 16},
        "sibling": {"qo_len": 5, "prefix_len": 16, "prefix": "target_p"},
        "short": {"qo_len": 3},
        "long": {"qo_len": 70},
        "decode": {"qo_len": 1, "prefix_len": 9, "copies": 3},
    },
    "cases": {
        "alone": ["target"],
        "mixed": ["short", "target", "long"],
        "mixed_decode": ["target", "decode"],
        "prefix_alone": ["target_p"],
        "prefix_shared": ["target_p", "sibling"],
    },
}


def small(**overrides):
    data = copy.deepcopy(SMALL)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key not in ("requests", "cases", "env"):
            data[key].update(value)
        else:
            data[key] = value
    return data


def run_inline(store: RunStore, data: dict, run_id: str, gpus: int = 1) -> str:
    """A run without Ray: every shard in this process (tests of store and compare)."""
    left = inline.run_inline(store, spec_from_dict(data), run_id, gpus)
    assert not left, "cells for isolated workers need Ray (runner.submit)"
    return run_id


_TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_INT = {2: torch.int16, 4: torch.int32}


def flip_one_ulp(store: RunStore, run_id: str, match) -> dict:
    """Flip the lowest bit of element 0 of one stored output; rewrite its blob and row. Returns the row."""
    for path in store.row_files(run_id):
        table = pq.read_table(path, filesystem=store.fs)
        rows = table.to_pylist()
        for row in rows:
            if row["status"] == "ok" and match(row):
                raw = bytearray(store.read_blob([run_id], row["out_digest"]))
                raw[0] ^= 1
                dtype = _TORCH[row["out_dtype"]]
                t = torch.frombuffer(raw, dtype=_INT[torch.empty(0, dtype=dtype).element_size()])
                t = t.view(dtype).reshape(row["out_shape"])
                row["out_digest"] = tensor_digest(t)
                store.write_blobs({row["out_digest"]: bytes(raw)})
                shard = path.rsplit("part-", 1)[1].removesuffix(".parquet")
                store.write_rows(run_id, shard, rows)
                return row
    raise AssertionError("no row matched")


def rewrite_rows(store: RunStore, run_id: str, change) -> None:
    """Apply change(row) to every row of a run (e.g. another flashinfer version)."""
    for path in store.row_files(run_id):
        rows = pq.read_table(path, filesystem=store.fs).to_pylist()
        for row in rows:
            change(row)
        store.write_rows(run_id, path.rsplit("part-", 1)[1].removesuffix(".parquet"), rows)


def cli_main(capsys, *args):
    """(exit code, stdout, stderr) of detrun's main(args) in this process."""
    from detrun.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


def one_line(err: str) -> str:
    """The one non-blank line of err (fails the test if there are more)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def drop_row(store: RunStore, run_id: str, match) -> dict:
    for path in store.row_files(run_id):
        rows = pq.read_table(path, filesystem=store.fs).to_pylist()
        keep = [r for r in rows if not match(r)]
        if len(keep) < len(rows):
            shard = path.rsplit("part-", 1)[1].removesuffix(".parquet")
            store.write_rows(run_id, shard, keep)
            return next(r for r in rows if match(r))
    raise AssertionError("no row matched")


class FakeGraph:
    """Stands in for backends.base.capture on the CPU: counts captures; replay runs the function again."""

    captures = 0

    def __init__(self, fn, device, stages=None, plan=None):
        FakeGraph.captures += 1
        self.fn, self.plan = fn, plan

    def replay(self):
        from detrun.kernels.backends.base import KernelTime

        return tuple(t.clone() for t in self.fn()), KernelTime(0.0)
