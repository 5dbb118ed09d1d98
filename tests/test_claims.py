"""Claims per axis: spec `expect`, --expect, --strict, deterministic; a run that compared nothing fails."""

import html
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.judge.claims import claims_of, parse_expect
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.judge.history import history
from detrun.present.junit import junit_xml
from detrun.present.render import print_history
from detrun.present.report import build_report
from detrun.spec.model import load_spec
from tests.helpers import flip_one_ulp, rewrite_rows, run_inline, small, terminal_text

SPLIT = dict(reference={"variant": "split_kv", "kv_tile": 4}, repeats=1, modes=["eager"])


def test_explained_batch_passes_and_says_so(store):
    run_inline(store, small(**SPLIT), "split")
    verdict = judge(compare_runs(store, ["split"]))
    assert verdict.exit_code == 0 and verdict.label == "REPRODUCIBLE"
    assert verdict.headline.startswith("REPRODUCIBLE (exit 0); explained: batch 2 requests (kv_chunk_size)")
    assert "ran: reference torch-split_kv" in verdict.headline


def test_batch_claimed_bitwise_breaks_with_the_plan_as_cause(store):
    run_inline(store, small(expect={"batch": "bitwise"}, **SPLIT), "split")
    verdict = judge(compare_runs(store, ["split"]))
    assert verdict.exit_code == 1 and verdict.label == "DETERMINISM FAILURE"
    (broken,) = verdict.of("broken_claim")
    assert broken.title == "batch claimed bitwise, 2 requests (target, target_p) differ (kv_chunk_size 4 vs 36)"
    assert verdict.headline.startswith(f"DETERMINISM FAILURE (exit 1); {broken.title}")
    assert {f.request for f in verdict.of("explained") if f.severity == "fail"} == {"target", "target_p"}


def test_claims_from_spec_override_and_strict():
    assert claims_of([{"deterministic": True}]).level("batch") == "bitwise"
    assert claims_of([{"deterministic": True, "expect": {"batch": "explained"}}]).level("batch") == "explained"
    assert claims_of([{"expect": {"mode": "ignore"}}, {"expect": {"mode": "bitwise"}}]).level("mode") == "bitwise"
    assert claims_of([{"expect": {"mode": "bitwise"}}], {"mode": "ignore"}).level("mode") == "ignore"
    assert set(claims_of([], strict=True).levels.values()) == {"bitwise"}
    assert claims_of([]).levels == dict(dict.fromkeys(("repeat", "gpu", "mode", "batch", "phase", "run"), "explained"),
                                        backend="ignore", version="explained")
    assert load_spec("jobs/paged.yaml", ["expect.batch=bitwise"]).expect == {"batch": "bitwise"}
    with pytest.raises(DetrunError, match="expect.batch"):
        load_spec("jobs/paged.yaml", ["expect.batch=bitwize"])
    with pytest.raises(DetrunError, match="--expect 'batch'"):
        parse_expect(["batch"])
    assert parse_expect(["batch=bitwise", "run=ignore"]) == {"batch": "bitwise", "run": "ignore"}
    assert parse_expect(["backend=bitwise", "version=ignore"]) == {"backend": "bitwise", "version": "ignore"}
    spec = load_spec("jobs/paged.yaml", ["expect.backend=bitwise", "expect.version=ignore"])
    levels = claims_of([spec.model_dump(mode="json")]).levels
    assert levels == dict(claims_of([]).levels, backend="bitwise", version="ignore")
    with pytest.raises(DetrunError, match="expect.vresion"):
        load_spec("jobs/paged.yaml", ["expect.vresion=bitwise"])


def test_compare_accepts_claims(store, tmp_path):
    run_inline(store, small(**SPLIT), "split")
    cli, rr = CliRunner(), ["--runs-root", store.root]
    assert cli.invoke(app, ["compare", "split", *rr]).exit_code == 0
    out = cli.invoke(app, ["compare", "split", "--expect", "batch=bitwise", *rr])
    assert out.exit_code == 1 and "batch claimed bitwise, 2 requests" in out.output
    assert cli.invoke(app, ["compare", "split", "--strict", *rr]).exit_code == 1
    bad = cli.invoke(app, ["compare", "split", "--expect", "batch=exact", *rr])
    assert bad.exit_code == 2 and "--expect 'batch=exact'" in bad.output


def test_ignored_axis_is_shown_not_counted(store):
    run_inline(store, small(repeats=2, modes=["eager"]), "flip")
    flip_one_ulp(store, "flip", lambda r: r["case"] == "mixed" and r["request"] == "long")  # long: one case
    assert judge(compare_runs(store, ["flip"])).exit_code == 1
    verdict = judge(compare_runs(store, ["flip"], expect={"repeat": "ignore"}))
    assert verdict.exit_code == 0 and "held: batch" in verdict.headline
    (ignored,) = verdict.of("differs")
    assert ignored.severity == "info" and ignored.title.endswith("unexplained [repeat claimed ignore]")


def test_stated_claim_that_nothing_compared_is_not_verified(store):
    run_inline(store, small(repeats=1, modes=["eager"]), "one_gpu")
    verdict = judge(compare_runs(store, ["one_gpu"], expect={"gpu": "bitwise"}))
    (unchecked,) = verdict.of("unverified_claim")
    assert unchecked.severity == "fail" and unchecked.title == (
        "gpu claimed bitwise, but nothing was compared along gpu: all rows have one GPU slot: g0")
    assert verdict.exit_code == 1 and verdict.label == "NOT VERIFIED"
    assert verdict.headline.startswith(f"NOT VERIFIED (exit 1); {unchecked.title}; ")
    assert "not compared: repeat, gpu (claimed bitwise), mode, phase, run" in verdict.headline
    # a claim the job did not state is only "not compared"; one claimed `ignore` needs nothing
    assert judge(compare_runs(store, ["one_gpu"])).exit_code == 0
    assert judge(compare_runs(store, ["one_gpu"], expect={"gpu": "ignore"})).exit_code == 0


def _known_bugs_but_alone(row):
    """Every row outside case alone becomes a known bug the task did not run."""
    if row["case"] != "alone":
        row.update(status="known_bug", reason="not run: a known bug", out_digest="", lse_digest="")


@pytest.mark.parametrize("stated", [
    dict(expect={"batch": "bitwise"}),  # the spec's expect
    dict(deterministic=True),  # its implied batch claim
])
def test_a_stated_claim_whose_cells_are_all_known_bugs_is_not_verified(store, stated):
    run_inline(store, small(repeats=2, modes=["eager"], **stated), "bugs")
    rewrite_rows(store, "bugs", _known_bugs_but_alone)
    verdict = judge(compare_runs(store, ["bugs"]))
    assert verdict.exit_code == 1 and verdict.label == "NOT VERIFIED"  # repeat held: something was compared
    (unchecked,) = verdict.of("unverified_claim")
    assert unchecked.title == ("batch claimed bitwise, but nothing was compared along batch: the rows that would "
                               "meet did not run (8 known bug)")  # target in mixed and mixed_decode, 2 repeats x 2
    assert unchecked.title in verdict.headline and "held: repeat" in verdict.headline
    assert f"claim nothing checked: {unchecked.title}" in terminal_text(verdict)
    (case,) = [c for c in ET.fromstring(junit_xml(verdict)).iter("testcase") if c.get("name") == "batch bitwise"]
    assert case.find("failure").get("message") == unchecked.title
    assert html.escape(unchecked.title) in build_report(verdict)
    (run,) = history(store).runs
    assert run.verdict == "NOT VERIFIED" and run.unverified == [unchecked.title]
    console = Console(record=True, width=400, color_system=None)
    print_history(history(store), console)
    assert f"not verified: {unchecked.title}" in console.export_text()


def test_expect_override_is_stated_and_strict_alone_is_a_note(store):
    run_inline(store, small(repeats=2, modes=["eager"]), "bugs")
    rewrite_rows(store, "bugs", _known_bugs_but_alone)
    assert judge(compare_runs(store, ["bugs"])).exit_code == 0  # no batch claim stated: batch is only not compared
    assert judge(compare_runs(store, ["bugs"], expect={"batch": "bitwise"})).label == "NOT VERIFIED"
    strict = judge(compare_runs(store, ["bugs"], strict=True))
    # --strict claims every axis bitwise, but states no claim of its own: what nothing can meet is a note
    assert strict.exit_code == 0 and strict.label == "REPRODUCIBLE"
    notes = {f.axis: f for f in strict.of("unverified_claim")}
    assert set(notes) == {"gpu", "mode", "batch", "phase", "run", "backend", "version"}
    assert {f.severity for f in notes.values()} == {"warn"}
    assert notes["batch"].title == ("batch claimed bitwise (--strict), but nothing was compared along batch: the "
                                    "rows that would meet did not run (8 known bug)")
    assert notes["run"].title.endswith("all rows have one run: bugs")
    assert notes["backend"].title.endswith("all rows have one backend: reference")
    assert notes["version"].title.endswith("all rows have one version: none (no versions:)")
    assert "not compared: gpu (claimed bitwise)" in strict.headline
    # --strict over a stated claim keeps it stated
    assert judge(compare_runs(store, ["bugs"], strict=True, expect={"batch": "bitwise"})).label == "NOT VERIFIED"


@pytest.mark.parametrize("data", [
    small(modes=["cudagraph"]),  # every cell skipped on a CPU
    small(repeats=1, modes=["eager"], requests={"only": {"qo_len": 5}}, cases={"one": ["only"]}),  # one row
])
def test_a_run_that_compared_nothing_is_not_a_pass(store, data):
    run_inline(store, data, "nothing")
    verdict = judge(compare_runs(store, ["nothing"]))
    assert verdict.exit_code == 1 and verdict.label == "NOT VERIFIED"
    assert "no pair of rows was compared on any claimed axis" in verdict.headline
    every_axis_ignored = judge(compare_runs(store, ["nothing"], expect=dict.fromkeys(
        ("repeat", "gpu", "mode", "batch", "run"), "ignore")))
    assert every_axis_ignored.exit_code == 1  # ignoring every axis claims nothing: still not a pass
