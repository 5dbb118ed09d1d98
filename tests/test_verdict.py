"""The Verdict is one frozen product: judged once per command, read by every presenter without the store, its
exit code an ExitCode; compare does not import the judge's findings (no import circle)."""

import ast
import dataclasses
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import ExitCode
from detrun.judge import findings
from detrun.judge.compare import compare_runs
from detrun.present.junit import junit_xml
from detrun.present.report import build_report
from detrun.store.runs import RunStore
from tests.helpers import ROOT, TINY, flip_one_ulp, run_inline, small, terminal_text


def test_exit_codes_are_one_enum():
    assert [(c.name, int(c)) for c in ExitCode] == [
        ("OK", 0), ("MISMATCH", 1), ("USAGE", 2), ("INTERNAL", 3), ("INTERRUPTED", 130)]


@pytest.mark.parametrize("command", [["compare", "--junit", "JUNIT"], ["report", "-o", "REPORT"]])
def test_a_command_judges_once(store, tmp_path, monkeypatch, command):
    run_inline(store, small(**TINY), "run")
    flip_one_ulp(store, "run", lambda r: r["case"] == "alone" and r["request"] == "target")
    calls, collapse = [], findings.collapse

    def counted(*args):  # judge folds the table once per call, wherever it is called from
        calls.append(args)
        return collapse(*args)

    monkeypatch.setattr(findings, "collapse", counted)
    args = [str(tmp_path / "out") if a in ("JUNIT", "REPORT") else a for a in command]
    out = CliRunner().invoke(app, [args[0], "run", *args[1:], "--runs-root", store.root])
    assert out.exit_code == (1 if command[0] == "compare" else 0), out.output
    assert len(calls) == 1 and (tmp_path / "out").exists()


def test_the_verdict_is_frozen_and_presented_without_the_store(store, monkeypatch):
    run_inline(store, small(**TINY), "run")
    flip_one_ulp(store, "run", lambda r: r["case"] == "alone" and r["request"] == "target")
    verdict = findings.judge(compare_runs(store, ["run"]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.exit_code = ExitCode.OK
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.findings[0].severity = "info"
    assert isinstance(verdict.findings, tuple) and isinstance(verdict.findings[0].items, tuple)
    assert verdict.exit_code is ExitCode.MISMATCH and verdict.failed
    for name in ("dataset", "read_rows", "manifest", "read_blob", "list_runs"):  # no presenter reads runs
        monkeypatch.setattr(RunStore, name, lambda *a, **k: pytest.fail("a presenter read the store"))
    html, xml, text = build_report(verdict), junit_xml(verdict), terminal_text(verdict)
    assert verdict.headline in text and verdict.headline in ET.fromstring(xml).find(".//property").get("value")
    (fingerprint,) = verdict.environment  # the report's environment table, from the verdict
    assert f"<td>{fingerprint}</td>" in html and verdict.max_ulp["target"] == 1
    plot = html.split('<svg id="ulp-plot"')[1].split("</svg>")[0]  # the max-ULP bars, from the verdict
    assert ">target</text>" in plot and ">1</text>" in plot


def _imports(path) -> set:
    tree = ast.parse((ROOT / path).read_text())
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_compare_does_not_import_the_judge():
    assert not _imports("detrun/judge/compare.py") & {"findings", "verdict", "baseline", "history"}
    assert "compare" in _imports("detrun/judge/findings.py")  # one direction: the judge reads compare's product
