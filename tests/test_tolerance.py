"""Bound claims (ulp:N, abs:X, rel:X): judged on the measured numbers of every differing pair, whatever the plans;
a pair without numbers cannot hold one; every presenter shows the bound and the worst value measured."""

import html
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from detrun.cli import app
from detrun.errors import DetrunError
from detrun.judge.claims import claims_of, parse_expect
from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from detrun.judge.history import history
from detrun.present.jsondoc import verdict_doc
from detrun.present.render import print_history
from detrun.present.report import build_report
from detrun.spec.model import load_spec
from detrun.store.runs import RunStore
from tests.helpers import flip_one_ulp, junit_text, rewrite_rows, run_inline, small, terminal_text

TWO = dict(repeats=2, modes=["eager"])
SPLIT = dict(reference={"variant": "split_kv", "kv_tile": 4}, repeats=1, modes=["eager"])
LONG = "mixed/long/eager"  # request long is in case mixed only: only the repeat axis compares it


def _is_long(row) -> bool:
    return row["case"] == "mixed" and row["request"] == "long"


@pytest.fixture(scope="module")
def flipped(tmp_path_factory):
    """(store, flipped row): run 'flip' claims repeat ulp:0; one output of request long has one bit flipped."""
    store = RunStore(str(tmp_path_factory.mktemp("runs")))
    run_inline(store, small(expect={"repeat": "ulp:0"}, **TWO), "flip")
    return store, flip_one_ulp(store, "flip", _is_long)


def _claim(verdict, axis):
    return next(c for c in verdict.claims if c.axis == axis)


def test_a_one_ulp_flip_breaks_ulp0_and_holds_ulp1(flipped):
    store, _ = flipped
    broken = judge(compare_runs(store, ["flip"]))  # the spec's repeat ulp:0
    claim = _claim(broken, "repeat")
    assert broken.exit_code == 1 and claim.status == "broken" and claim.differing == ("long",)
    assert (claim.worst, claim.pairs, claim.failing) == (1.0, 1, 1)
    assert claim.text == "repeat ulp:0 broken: max 1 ULP > 0 in 1/1 pairs"
    (finding,) = broken.of("broken_claim")
    assert finding.title == "repeat claimed ulp:0, 1 request (long) differs: max 1 ULP > 0 in 1/1 pairs"
    assert broken.cells["long"]["repeat"].state == "breaks" and broken.max_ulp["long"] == 1
    held = judge(compare_runs(store, ["flip"], expect={"repeat": "ulp:1"}))
    claim = _claim(held, "repeat")
    assert held.exit_code == 0 and claim.status == "held" and claim.explained == ("long",) and not claim.differing
    assert claim.text == "repeat ulp:1 held: max 1 ULP"
    assert "held: repeat ulp:1 (max 1 ULP)" in held.headline
    cell = held.cells["long"]["repeat"]
    assert (cell.state, cell.text) == ("within", "within ulp:1 (max 1 ULP)")
    (within,) = [f for f in held.findings if f.axis == "repeat" and f.request == "long"]
    assert within.severity == "info" and within.title.endswith("[within ulp:1: max 1 ULP]")
    worst = within.examples[0]
    assert worst.startswith(f"worst pair across repeat under ulp:1: flip:{LONG}/r0/g0 vs flip:{LONG}/r1/g0")
    assert "out: 1/8960 differ, max abs 0.00391, max rel 0.00457, max ULP 1; by ULP 1: 1; first at token 0, " \
           "head 0, col 0" in worst


def test_every_presenter_shows_the_bound_and_the_measured_value(flipped):
    store, _ = flipped
    verdict = judge(compare_runs(store, ["flip"]))
    said = "repeat ulp:0 broken: max 1 ULP > 0 in 1/1 pairs"
    title = verdict.of("broken_claim")[0].title
    text = terminal_text(verdict)
    assert f"claims: {said}" in text and f"broken claim: {title}" in text and "breaks ulp:0 (max 1 ULP > 0" in text
    assert title in junit_text(verdict) and "worst pair across repeat under ulp:0" in junit_text(verdict)
    report = build_report(verdict)
    assert "<td>ulp:0</td><td>broken</td><td>max 1 ULP &gt; 0 in 1/1 pairs</td>" in report
    assert html.escape(title) in report
    doc = verdict_doc(verdict)
    (claim,) = [c for c in doc["claims"] if c["axis"] == "repeat"]
    assert (claim["level"], claim["status"], claim["measured"], claim["worst"]) == (
        "ulp:0", "broken", "max 1 ULP > 0 in 1/1 pairs", 1.0)
    measured = doc["table"]["long"]["repeat"]["measured"]
    assert measured["bound"] == {"kind": "ulp", "limit": 0.0} and (measured["beyond"], measured["pairs"]) == (1, 1)
    json.dumps(doc)
    (run,) = history(store).runs
    assert run.verdict == "FAIL" and run.bounds == [said]
    console = Console(record=True, width=400, color_system=None)
    print_history(history(store), console)
    assert f"bound: {said}" in console.export_text()
    held = judge(compare_runs(store, ["flip"], expect={"repeat": "ulp:1"}))
    assert "repeat ulp:1 held: max 1 ULP" in junit_text(held) and "claims: repeat ulp:1 held: max 1 ULP" in \
        terminal_text(held)


@pytest.mark.parametrize("kind", ["abs", "rel"])
def test_a_bound_smaller_than_the_measured_difference_fails(flipped, kind):
    store, flip = flipped
    (m,) = [m for m in compare_runs(store, ["flip"], expect={"repeat": "bitwise"}).mismatches if m.axis == "repeat"]
    value = {"abs": m.out.max_abs, "rel": m.out.max_rel}[kind]
    assert value > 0
    at = judge(compare_runs(store, ["flip"], expect={"repeat": f"{kind}:{value!r}"}))
    assert at.exit_code == 0 and _claim(at, "repeat").worst == value
    below = judge(compare_runs(store, ["flip"], expect={"repeat": f"{kind}:{value / 2!r}"}))
    claim = _claim(below, "repeat")
    assert below.exit_code == 1 and claim.status == "broken" and claim.worst == value
    assert claim.measured == f"max {kind} {value:.3g} > {value / 2!r} in 1/1 pairs"


def test_differences_explained_by_plan_beyond_a_bound_still_fail(store):
    run_inline(store, small(**SPLIT), "split")
    assert judge(compare_runs(store, ["split"])).exit_code == 0  # explained by kv_chunk_size
    tight = judge(compare_runs(store, ["split"], expect={"batch": "ulp:0"}))
    claim = _claim(tight, "batch")
    assert tight.exit_code == 1 and claim.status == "broken" and set(claim.differing) == {"target", "target_p"}
    worst = int(claim.worst)
    assert worst >= 1 and claim.failing == claim.pairs
    assert judge(compare_runs(store, ["split"], expect={"batch": f"ulp:{worst}"})).exit_code == 0
    assert judge(compare_runs(store, ["split"], expect={"batch": f"ulp:{worst - 1}"})).exit_code == 1


def test_a_bound_on_pairs_without_stored_tensors_fails_saying_why(store):
    run_inline(store, small(store_tensors=False, **SPLIT), "bare")
    verdict = judge(compare_runs(store, ["bare"], expect={"batch": "ulp:1000000"}))
    claim = _claim(verdict, "batch")
    assert verdict.exit_code == 1 and claim.status == "broken" and claim.worst is None
    assert claim.failing == claim.pairs > 0
    (finding,) = verdict.of("broken_claim")
    assert finding.title.startswith(f"batch claimed ulp:1000000, 2 requests (target, target_p) differ: "
                                    f"{claim.pairs}/{claim.pairs} pairs without numbers (out: no numbers: run bare "
                                    f"stores no tensors (store_tensors: false))")
    assert verdict.cells["target"]["batch"].state == "breaks"


def test_a_bound_on_a_pair_whose_blob_is_missing_fails_saying_why(store):
    run_inline(store, small(**TWO), "gone")
    rewrite_rows(store, "gone", lambda r: r.update(out_digest="0" * 32) if _is_long(r) and r["repeat"] == 1 else 0)
    verdict = judge(compare_runs(store, ["gone"], expect={"repeat": "abs:1"}))
    claim = _claim(verdict, "repeat")
    assert verdict.exit_code == 1 and claim.differing == ("long",)
    assert claim.measured.startswith(f"1/1 pairs without numbers (out: no numbers: blob {'0' * 32} missing under")


def test_a_bound_reads_no_tensor_when_nothing_differs(store, monkeypatch):
    run_inline(store, small(**TWO), "same")

    def no_reads(*args):
        raise AssertionError("a blob was read although nothing differs")

    monkeypatch.setattr(RunStore, "read_blob", no_reads)
    verdict = judge(compare_runs(store, ["same"], expect={"repeat": "ulp:0", "batch": "rel:0"}))
    assert verdict.exit_code == 0 and _claim(verdict, "repeat").text == "repeat ulp:0 held"
    assert "held: repeat ulp:0, batch rel:0" in verdict.headline


def _ref(reference, out_abs, lse_abs):
    return json.dumps({"reference": reference, "out": {"max_abs": out_abs, "max_rel": out_abs / 2, "max_ulp": 3},
                       "lse": {"max_abs": lse_abs, "max_rel": 0.0, "max_ulp": 1}})


def test_a_shown_pair_says_which_row_is_further_from_the_reference(flipped, tmp_path):
    store = RunStore(str(tmp_path / "runs"))
    run_inline(store, small(**TWO), "ref")
    flip_one_ulp(store, "ref", _is_long)
    errors = {0: _ref("fp64-cpu", 0.004, 1e-6), 1: _ref("fp64-cpu", 0.001, 2e-6)}
    rewrite_rows(store, "ref", lambda r: r.update(ref_error=errors[r["repeat"]]) if _is_long(r) else 0)
    cmp = compare_runs(store, ["ref"], expect={"repeat": "ulp:0"})
    (m,) = [m for m in cmp.mismatches if m.axis == "repeat"]
    a, b = f"ref:{LONG}/r0/g0", f"ref:{LONG}/r1/g0"
    assert m.reference == [
        f"out vs fp64-cpu: {a} is further (max abs 0.004 vs 0.001, max rel 0.002 vs 0.0005, max ULP 3 vs 3)",
        f"lse vs fp64-cpu: {b} is further (max abs 1e-06 vs 2e-06, max rel 0 vs 0, max ULP 1 vs 1)"]
    verdict = judge(cmp)
    (shown,) = [f for f in verdict.findings if f.kind == "differs" and f.axis == "repeat"]
    assert all(line in shown.examples[0] and line in shown.examples[1] for line in m.reference)  # worst pair, mismatch
    assert m.reference[0] in terminal_text(verdict) and m.reference[1] in junit_text(verdict)
    errors[1] = _ref("fp32", 0.001, 2e-6)  # another reference: not compared
    rewrite_rows(store, "ref", lambda r: r.update(ref_error=errors[r["repeat"]]) if _is_long(r) else 0)
    (m,) = [m for m in compare_runs(store, ["ref"]).mismatches if m.axis == "repeat"]
    assert m.reference == ["reference: not compared, the rows' references differ (fp64-cpu vs fp32)"]
    rewrite_rows(store, "ref", lambda r: r.update(ref_error="") if r["repeat"] == 1 else 0)  # one side has none
    (m,) = [m for m in compare_runs(store, ["ref"]).mismatches if m.axis == "repeat"]
    assert m.reference == []


@pytest.mark.parametrize("item, said", [
    ("batch=ulp:-1", "'ulp:-1': ulp's bound must be a whole number >= 0"),
    ("batch=ulp:1.5", "'ulp:1.5': ulp's bound must be a whole number >= 0"),
    ("batch=abs:x", "'abs:x': abs's bound must be a finite number >= 0"),
    ("batch=rel:nan", "'rel:nan': rel's bound must be a finite number >= 0"),
    ("batch=foo", "'foo' is not a claim level: one of bitwise, explained, ignore, ulp:N, abs:X or rel:X"),
])
def test_a_bad_bound_is_a_one_line_error_naming_the_option_or_field(flipped, item, said):
    with pytest.raises(DetrunError) as err:
        parse_expect([item])
    assert str(err.value) == f"--expect {item!r}: {said}"
    with pytest.raises(DetrunError) as err:
        load_spec("jobs/paged.yaml", [f"expect.{item}"])
    assert str(err.value) == f"--set expect.{item}: expect.batch: {said}"
    store, _ = flipped
    out = CliRunner().invoke(app, ["compare", "flip", "--expect", item, "--runs-root", store.root])
    assert out.exit_code == 2 and [line for line in out.output.splitlines() if line.strip()] == [
        f"detrun: error: --expect {item!r}: {said}"]


def test_bounds_are_spelled_one_way_and_ranked_between_bitwise_and_explained():
    assert parse_expect(["batch=abs:1e-3", "run=ulp:04"]) == {"batch": "abs:0.001", "run": "ulp:4"}
    assert load_spec("jobs/paged.yaml", ["expect.batch=rel:0.5"]).expect == {"batch": "rel:0.5"}
    assert claims_of([{"expect": {"batch": "ulp:4"}}, {"expect": {"batch": "bitwise"}}]).level("batch") == "bitwise"
    assert claims_of([{"expect": {"batch": "explained"}}, {"expect": {"batch": "ulp:4"}}]).level("batch") == "ulp:4"
    assert claims_of([{"expect": {"batch": "ulp:4"}}, {"expect": {"batch": "ulp:2"}}]).level("batch") == "ulp:2"
    assert claims_of([{"expect": {"batch": "ulp:4"}}], strict=True).level("batch") == "bitwise"
    assert claims_of([], {"mode": "abs:0.5"}).bound("mode").limit == 0.5
