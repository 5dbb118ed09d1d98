"""Flags and settings read once: a task's TaskFlags reach its backend and its rows from one object; the driver's
DETRUN_* settings are checked when a command starts (a bad one: exit 2 naming it); no module reads the
environment when it is imported."""

import ast
import json

import pytest
import torch

from detrun import exitpolicy
from detrun.cli import app
from detrun.envflags import (
    DRIVER_VARIABLES,
    TENSOR_CORE_FLAG,
    USE_PAGED_FLAG,
    DriverSettings,
    TaskFlags,
    driver_settings,
)
from detrun.errors import DetrunError
from detrun.kernels.backends.reference import ReferenceBackend
from detrun.run import worker
from detrun.spec.matrix import Shard
from detrun.spec.model import spec_from_dict
from tests.helpers import ROOT, small


@pytest.mark.parametrize("name", sorted(DRIVER_VARIABLES.values()))
@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan"])
def test_a_bad_driver_setting_exits_2_before_the_command_naming_it(name, value, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv(name, value)
    assert exitpolicy.run(app, ["list", "--runs-root", str(tmp_path / "runs")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().count("\n") == 0
    assert err.startswith(f"detrun: error: {name}={value!r}: expected a number of seconds > 0")


def test_driver_settings_are_read_from_the_environment_with_defaults():
    assert driver_settings({}) == DriverSettings()
    read = driver_settings({"DETRUN_HEARTBEAT_S": "0.5", "DETRUN_NODE_LOSS_GRACE_S": "3"})
    assert (read.heartbeat_s, read.node_loss_grace_s, read.pg_timeout_s) == (0.5, 3.0, 60.0)
    with pytest.raises(DetrunError, match="DETRUN_ISOLATION_GRACE_S='inf'"):
        driver_settings({"DETRUN_ISOLATION_GRACE_S": "inf"})
    assert driver_settings({}).worker_niceness == 0
    assert driver_settings({"DETRUN_WORKER_NICENESS": "15"}).worker_niceness == 15
    for bad in ("-1", "20", "low"):
        with pytest.raises(DetrunError, match=f"DETRUN_WORKER_NICENESS='{bad}': expected a whole number from 0 to 19"):
            driver_settings({"DETRUN_WORKER_NICENESS": bad})


def test_task_flags_parse_as_sglang_does_and_name_a_bad_value():
    flags = TaskFlags.parse({USE_PAGED_FLAG: "Yes", TENSOR_CORE_FLAG: "TRUE", "OTHER": "x", "MINE": "1"}, ["MINE"])
    assert (flags.use_paged, flags.tensor_core) == (True, True)
    assert flags.flags == {USE_PAGED_FLAG: "Yes", TENSOR_CORE_FLAG: "TRUE", "MINE": "1"}  # not OTHER: unnamed
    assert TaskFlags.parse({TENSOR_CORE_FLAG: "1"}).tensor_core is False  # SGLang: only "true" is true
    assert TaskFlags.parse({}) == TaskFlags() and TaskFlags().tensor_core is None
    with pytest.raises(ValueError, match=f"{USE_PAGED_FLAG}='on' is not a boolean"):
        TaskFlags.parse({USE_PAGED_FLAG: "on"})
    with pytest.raises(ValueError, match="DETRUN_DIGEST_DEPTH='0'"):
        TaskFlags.parse({"DETRUN_DIGEST_DEPTH": "0"})


def test_the_backend_reads_no_environment_only_its_flags(monkeypatch):
    monkeypatch.setenv(USE_PAGED_FLAG, "0")
    spec = spec_from_dict(small())
    assert ReferenceBackend(spec, torch.device("cpu"), flags=TaskFlags(use_paged=True)).use_paged is True
    monkeypatch.setenv(USE_PAGED_FLAG, "1")
    assert ReferenceBackend(spec, torch.device("cpu")).use_paged is False  # no flags given: every flag unset


def test_the_backend_gets_the_tasks_flags_and_its_rows_record_the_same_object(monkeypatch):
    """Flags set in the task's environment (here on the node, not in the spec): the backend is built with the
    one TaskFlags the task parsed, and every row's use_paged, flags and knobs come from it. The tensor-core flag
    says false where SGLang's rule (GQA group 4, bf16) says true: the knob must follow the flag."""
    monkeypatch.setenv(USE_PAGED_FLAG, "y")
    monkeypatch.setenv(TENSOR_CORE_FLAG, "false")
    monkeypatch.setenv("DETRUN_DIGEST_DEPTH", "2")
    given = []
    real = worker.make_backend

    def spy(name, spec, device, stages=None, flags=None):
        given.append(flags)
        return real(name, spec, device, stages, flags)

    monkeypatch.setattr(worker, "make_backend", spy)
    data = small(modes=["eager"], repeats=1, heads={"qo": 8, "kv": 2}, env={"DETRUN_DIGEST_DEPTH": "2"})
    runner = worker.ShardRunner(spec_from_dict(data), Shard(0, (0,)), "flags")
    assert given == [runner.flags] and runner.backend.flags is runner.flags and runner.depth == 2
    rows = runner.run()["rows"]
    assert rows and all(r["status"] == "ok" for r in rows)
    expected = {USE_PAGED_FLAG: "y", TENSOR_CORE_FLAG: "false", "DETRUN_DIGEST_DEPTH": "2"}
    for row in rows:
        assert row["use_paged"] is True and json.loads(row["flags"]) == expected
        assert json.loads(row["knobs"])["flashinfer.decode.tensor_cores"] is False


def _module_level_env_reads(tree: ast.AST):
    """os.environ / os.getenv nodes that run when the module is imported (outside every function body)."""
    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if not inner and isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name) \
                    and child.value.id == "os" and child.attr in ("environ", "getenv"):
                yield child.lineno
            yield from walk(child, inner)
    yield from walk(tree, False)


def test_no_module_reads_the_environment_when_imported():
    """A setting read at import fails as an internal error (exit 3) from wherever it is first imported; detrun
    reads its settings when a command starts (driver_settings) or a task parses its flags (TaskFlags)."""
    found = [f"{p.relative_to(ROOT)}:{line}" for p in sorted((ROOT / "detrun").rglob("*.py"))
             for line in _module_level_env_reads(ast.parse(p.read_text()))]
    assert found == []
    planted = ast.parse("import os\nX = float(os.environ.get('A', '1'))\ndef f():\n    return os.environ['B']\n")
    assert list(_module_level_env_reads(planted)) == [2]  # the check finds a module-level read, not one in f
