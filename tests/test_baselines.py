"""Baselines: set, shown, compared against (same fingerprint, or the nearest with the fields that differ named);
a run that fails on its own is refused; the nightly CLI commands around them (no Ray: runs made inline)."""

import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.judge.baseline import compare_with_baseline, list_baselines, set_baseline
from detrun.judge.claims import Checks
from detrun.judge.findings import judge
from detrun.record.fingerprint import fingerprint_of
from detrun.store.runs import RunStore
from tests.helpers import TINY, flip_one_ulp, is_alone_target, rewrite_rows, run_inline, small


def test_a_set_baseline_is_listed_stored_and_compared_against(store):
    run_inline(store, small(**TINY), "base")
    run_inline(store, small(**TINY), "next")
    docs = set_baseline(store, "base")
    assert [d["run_id"] for d in docs] == ["base"]
    shown = list_baselines(store)
    assert shown == docs and shown[0]["spec"] == "small"
    assert (store.read_json(f"baselines/small/{docs[0]['fingerprint']}.json")) == docs[0]
    cmp, base = compare_with_baseline(store, "next")
    assert cmp.runs == ["base", "next"] and base.run == "base" and not judge(cmp, base).failed
    assert "bitwise against baseline base (same fingerprint)" in base.lines[0]
    assert any(v.axis == "run" and v.status == "equal" for v in cmp.verdicts)


def test_baseline_catches_regression_and_refuses_failing_run(store):
    run_inline(store, small(**TINY), "base")
    run_inline(store, small(**TINY), "bad")
    set_baseline(store, "base")
    flip_one_ulp(store, "bad", is_alone_target)
    cmp, base = compare_with_baseline(store, "bad")
    assert judge(cmp, base).failed and judge(cmp, base).exit_code == 1
    assert any(m.axis == "run" and m.label == "unexplained" and m.out.max_ulp == 1 for m in cmp.mismatches)
    with pytest.raises(DetrunError, match="not reproducible on its own"):
        set_baseline(store, "bad")


def test_the_nearest_fingerprint_baseline_names_the_fields_that_differ(store):
    run_inline(store, small(**TINY), "base")
    run_inline(store, small(**TINY), "upgraded")
    set_baseline(store, "base")

    def upgrade(row):  # versions no machine has: whatever torch this one runs, they differ from it
        row["flashinfer"], row["torch"] = "0.99.0", "99.0.0"
        row["fingerprint"] = fingerprint_of(row)

    rewrite_rows(store, "upgraded", upgrade)
    flip_one_ulp(store, "upgraded", lambda r: r["case"] == "mixed" and r["request"] == "long")
    cmp, base_context = compare_with_baseline(store, "upgraded")
    context = base_context.lines[0]
    base = store.read_rows(["base"]).to_pylist()[0]  # the versions this machine ran the baseline with
    assert "no baseline with this fingerprint" in context
    assert f"flashinfer: {base['flashinfer']} vs 0.99.0" in context and f"torch: {base['torch']} vs 99.0.0" in context
    run_axis = [m for m in cmp.mismatches if m.axis == "run"]
    assert run_axis and all(m.label == "explained by environment: torch" for m in run_axis)
    assert not any(v.axis == "run" and v.status == "differs" for v in cmp.verdicts)
    assert judge(*compare_with_baseline(store, "upgraded", Checks(strict=True))).failed


def test_a_run_of_another_spec_is_refused_naming_the_field(store):
    run_inline(store, small(**TINY), "base")
    run_inline(store, small(repeats=1, modes=["eager"], seed=8), "other")
    set_baseline(store, "base")
    with pytest.raises(DetrunError, match="differs in: seed"):
        compare_with_baseline(store, "other")


def test_a_run_without_a_baseline_says_so(store):
    run_inline(store, small(**TINY), "lonely")
    cmp, base = compare_with_baseline(store, "lonely")
    assert cmp.runs == ["lonely"] and "no baseline set" in base.lines[0]


def test_nightly_cli_sets_a_baseline_and_compares_history_and_report_against_it(tmp_path, any_root):
    store = RunStore(any_root)
    for name in ("n1", "n2", "n3"):
        run_inline(store, small(**TINY), name)
    flip_one_ulp(store, "n3", is_alone_target)
    cli, rr = CliRunner(), ["--runs-root", any_root]
    assert "no baselines" in cli.invoke(app, ["baseline", "show", *rr]).output
    assert cli.invoke(app, ["baseline", "set", "n3", *rr]).exit_code == 2  # it fails on its own
    out = cli.invoke(app, ["baseline", "set", "n1", *rr])
    assert out.exit_code == 0 and "-> n1" in out.output
    assert " n1 " in cli.invoke(app, ["baseline", "show", *rr]).output
    junit = tmp_path / "ci" / "junit.xml"
    good = cli.invoke(app, ["compare", "n2", "--baseline", "--junit", str(junit), *rr])
    assert good.exit_code == 0 and "bitwise against baseline n1" in good.output
    assert int(ET.parse(junit).getroot().get("failures")) == 0
    bad = cli.invoke(app, ["compare", "n3", "--baseline", "--junit", str(junit), *rr])
    # the run and batch claims, and target's run and batch comparisons
    assert bad.exit_code == 1 and int(ET.parse(junit).getroot().get("failures")) == 4
    assert "max ULP 1" in bad.output  # the flipped tensor's bytes were read back from the root
    assert cli.invoke(app, ["compare", "n2", "n3", "--baseline", *rr]).exit_code == 2
    hist = cli.invoke(app, ["history", *rr])
    assert hist.exit_code == 0 and "first differs at run 3 (n3)" in hist.output
    report = tmp_path / "report.html"
    rep = cli.invoke(app, ["report", "n3", "--baseline", "-o", str(report), *rr])
    assert rep.exit_code == 0 and '<svg id="heatmap"' in report.read_text()
