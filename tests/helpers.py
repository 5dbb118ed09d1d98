"""Plain helpers shared by the tests (fixtures are in conftest.py): small specs (tiny shapes: CPU seconds,
not minutes), inline runs, stored rows and tensors rewritten, the CLI in-process, text of the presenters,
and CPU stand-ins for CUDA graphs and flashinfer's prefill wrappers. Imported as `from tests.helpers import ...`."""

from __future__ import annotations

import copy
import io
import os
import pickle
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from detrun.kernels.backends.plan_layouts import FA2_PLAN_FIELDS
from detrun.kernels.digest import tensor_digest
from detrun.run import inline
from detrun.spec.model import spec_from_dict
from detrun.store.runs import RunStore

ROOT = Path(__file__).resolve().parent.parent  # the repository
JOBS = ROOT / "jobs"

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


TINY = dict(repeats=1, modes=["eager"])  # small(**TINY): one row per request and case (11 rows)


_LOCAL_RAY: dict = {}  # the gcs address of the local Ray local_ray() started, while it runs


def local_ray():
    """ray, connected to the tests' shared local Ray (2 CPUs, 2 declared GPUs; ~5 s a start), started if
    it is not the one connected: shared by the tests and module fixtures that need a Ray (conftest's
    ray_2gpu; the session ends it). Its workers inherit no SGLANG_ or DETRUN_ variable of this process:
    a task sees a flag only through its runtime_env, whichever test started the Ray."""
    import ray

    if ray.is_initialized() and ray.get_runtime_context().gcs_address == _LOCAL_RAY.get("address"):
        return ray
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as env:
        for name in [k for k in os.environ if k.startswith(("SGLANG_", "DETRUN_"))]:
            env.delenv(name)
        ray.init("local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    _LOCAL_RAY["address"] = ray.get_runtime_context().gcs_address
    return ray


def end_local_ray() -> None:
    import ray

    if _LOCAL_RAY.pop("address", None) and ray.is_initialized():
        ray.shutdown()


def small(**overrides):
    data = copy.deepcopy(SMALL)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key not in ("requests", "cases", "env"):
            data[key].update(value)
        else:
            data[key] = value
    return data


def is_alone_target(row) -> bool:
    """The row of request target in case alone (any mode, repeat, phase)."""
    return row["case"] == "alone" and row["request"] == "target"


def job_file(folder, **overrides) -> str:
    """small(**overrides) written as folder/job.yaml; its path."""
    path = Path(folder) / "job.yaml"
    path.write_text(yaml.safe_dump(small(**overrides)))
    return str(path)


def run_inline(store: RunStore, data: dict, run_id: str, gpus: int = 1) -> str:
    """A run without Ray: every shard in this process (tests of store and compare)."""
    left = inline.run_inline(store, spec_from_dict(data), run_id, gpus)
    assert not left, "cells for isolated workers need Ray (runner.submit)"
    return run_id


_TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_INT = {2: torch.int16, 4: torch.int32}


def tensor_of(raw: bytearray, dtype: str, shape) -> torch.Tensor:
    """A stored tensor rebuilt from its blob's bytes (shares raw's memory)."""
    as_torch = _TORCH[dtype]
    bits = _INT[torch.empty(0, dtype=as_torch).element_size()]
    return torch.frombuffer(raw, dtype=bits).view(as_torch).reshape(shape)


def stored_tensor(store: RunStore, run_id: str, row: dict, which: str = "out") -> torch.Tensor:
    """A row's stored output (which="out") or lse, rebuilt from its blob."""
    raw = bytearray(store.read_blob([run_id], row[f"{which}_digest"]))
    return tensor_of(raw, row[f"{which}_dtype"], row[f"{which}_shape"])


def flip_one_ulp(store: RunStore, run_id: str, match) -> dict:
    """Flip the lowest bit of element 0 of one stored output; rewrite its blob and row. Returns the row."""
    for path in store.row_files(run_id):
        table = pq.read_table(path, filesystem=store.fs)
        rows = table.to_pylist()
        for row in rows:
            if row["status"] == "ok" and match(row):
                raw = bytearray(store.read_blob([run_id], row["out_digest"]))
                raw[0] ^= 1
                row["out_digest"] = tensor_digest(tensor_of(raw, row["out_dtype"], row["out_shape"]))
                store.write_blobs({row["out_digest"]: bytes(raw)})
                shard = path.rsplit("part-", 1)[1].removesuffix(".parquet")
                store.write_rows(run_id, shard, rows)
                return row
    raise AssertionError("no row matched")


def rewrite_rows(store: RunStore, run_id: str, change, extra=()) -> None:
    """Apply change(row) to every row of a run (e.g. another flashinfer version); a row for which it returns
    False is dropped; extra rows are appended to the first part file."""
    for n, path in enumerate(store.row_files(run_id)):
        rows = [r for r in pq.read_table(path, filesystem=store.fs).to_pylist() if change(r) is not False]
        rows += [dict(r) for r in extra] if n == 0 else []
        store.write_rows(run_id, path.rsplit("part-", 1)[1].removesuffix(".parquet"), rows)


# The columns a shard's every row carries (its identity), and an ok row's results besides (the rest of the
# store's SCHEMA takes its defaults when written).
ROW_IDENTITY = {"run_id", "key", "case", "request", "mode", "phase", "repeat", "slot", "shard", "status", "reason",
                "backend", "torch", "fingerprint"}
OK_ROW = {"out_digest", "lse_digest", "out_dtype", "out_shape", "last_out_digest", "plan", "path", "attn"}
PLAIN = (str, int, float, bool, type(None), bytes)


def not_plain(value, where: str = "") -> list:
    """Where value (a row, a task's result) holds anything but plain Python values (str, int, float, bool,
    None, bytes, and lists and dicts of them): e.g. a torch.TorchVersion, which is a str to == but makes the
    process that unpickles it import torch."""
    if type(value) is dict:
        return [bad for k, v in value.items()
                for bad in not_plain(k, f"{where}[{k!r}] key") + not_plain(v, f"{where}[{k!r}]")]
    if type(value) in (list, tuple):
        return [bad for i, v in enumerate(value) for bad in not_plain(v, f"{where}[{i}]")]
    return [] if type(value) in PLAIN else [f"{where}: {type(value).__module__}.{type(value).__qualname__}"]


def modules_to_unpickle(value) -> set:
    """The modules a process must import to unpickle value (none for plain values)."""
    seen = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add(module)
            return super().find_class(module, name)

    Recorder(io.BytesIO(pickle.dumps(value))).load()
    return seen


def cli_main(capsys, *args):
    """(exit code, stdout, stderr) of detrun's main(args) in this process."""
    from detrun.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


def cli_error(capsys, *args):
    """(exit code, the one line on stderr) of detrun's main(args) in this process."""
    code, _, err = cli_main(capsys, *args)
    return code, one_line(err)


def one_line(err: str) -> str:
    """The one non-blank line of err (fails the test if there are more)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def terminal_text(verdict) -> str:
    """What `detrun compare` prints for a Verdict (no colour, wide)."""
    from rich.console import Console

    from detrun.present.render import print_comparison

    console = Console(record=True, width=400, color_system=None)
    print_comparison(verdict, console, details=100)
    return console.export_text()


def junit_text(verdict) -> str:
    """Every text and attribute value of a Verdict's JUnit XML, one a line."""
    from detrun.present.junit import junit_xml

    parts = []
    for el in ET.fromstring(junit_xml(verdict)).iter():
        parts += [el.text or "", *el.attrib.values()]
    return "\n".join(parts)


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
    cloned: list = []  # each replay's clone argument

    def __init__(self, fn, device, stages=None, plan=None):
        FakeGraph.captures += 1
        self.fn, self.plan = fn, plan

    def replay(self, clone=True):
        from detrun.kernels.backends.base import KernelTime

        FakeGraph.cloned.append(clone)
        outputs = self.fn()
        return tuple(t.clone() for t in outputs) if clone else outputs, KernelTime(0.0)


class FakePrefillWrapper:
    """Stands in for flashinfer's prefill wrappers on the CPU: records the wrappers made and their plans;
    run() writes a deterministic output in full."""

    made = []

    def __init__(self, workspace, layout, use_cuda_graph=False, backend="auto", **buffers):
        self.graph, self._backend, self.plans, self._plan_info = use_cuda_graph, backend, 0, []
        FakePrefillWrapper.made.append(self)

    def plan(self, *args, **kwargs):
        self.plans += 1
        self.causal = kwargs.get("causal")
        self._plan_info = [0] * len(FA2_PLAN_FIELDS)  # an FA2 plan of the pinned version's layout

    def run(self, q, *kv, out, lse, return_lse):
        out.copy_(q.to(out.dtype))  # deterministic, written in full
        lse.copy_(q.float().sum(-1))
        return out, lse


class FakePaged(FakePrefillWrapper):
    """BatchPrefillWithPagedKVCacheWrapper's stand-in."""


class FakeRagged(FakePrefillWrapper):
    """BatchPrefillWithRaggedKVCacheWrapper's stand-in."""


def fake_flashinfer(monkeypatch, paged=None) -> None:
    """flashinfer 0.6.7.post3 as the wrapper tests fake it (paged: another paged wrapper class), CUDA graphs
    captured by FakeGraph, the fakes' counters reset."""
    from detrun.kernels.backends import base

    fake = types.SimpleNamespace(
        __version__="0.6.7.post3", BatchPrefillWithPagedKVCacheWrapper=paged or FakePaged,
        BatchPrefillWithRaggedKVCacheWrapper=FakeRagged, merge_state=lambda o1, s1, o2, s2: (o1 + o2, s1 + s2))
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    monkeypatch.setattr(base, "capture", FakeGraph)
    FakeGraph.captures, FakePrefillWrapper.made = 0, []
