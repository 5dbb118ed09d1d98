"""Baselines, fingerprint mismatches, plan-aware verdicts and history (no Ray: runs made inline)."""

import json

import pytest

from detrun.judge.baseline import compare_with_baseline, list_baselines, set_baseline
from detrun.judge.claims import Checks
from detrun.judge.compare import compare_runs
from detrun.errors import DetrunError
from detrun.fingerprint import fingerprint_of
from detrun.judge.history import history
from detrun.store.runs import RunStore
from tests.helpers import flip_one_ulp, rewrite_rows, run_inline, small

TINY = dict(repeats=1, modes=["eager"])


def _target(row):
    return row["case"] == "alone" and row["request"] == "target"


@pytest.fixture
def store(tmp_path):
    return RunStore(str(tmp_path / "runs"))


def test_baseline_round_trip(store):
    run_inline(store, small(**TINY), "base")
    run_inline(store, small(**TINY), "next")
    docs = set_baseline(store, "base")
    assert [d["run_id"] for d in docs] == ["base"]
    shown = list_baselines(store)
    assert shown == docs and shown[0]["spec"] == "small"
    assert (store.read_json(f"baselines/small/{docs[0]['fingerprint']}.json")) == docs[0]
    cmp = compare_with_baseline(store, "next")
    assert cmp.runs == ["base", "next"] and cmp.baseline == "base" and not cmp.failed
    assert "bitwise against baseline base (same fingerprint)" in cmp.baseline_context[0]
    assert any(v.axis == "run" and v.status == "equal" for v in cmp.verdicts)


def test_baseline_catches_regression_and_refuses_failing_run(store):
    run_inline(store, small(**TINY), "base")
    run_inline(store, small(**TINY), "bad")
    set_baseline(store, "base")
    flip_one_ulp(store, "bad", _target)
    cmp = compare_with_baseline(store, "bad")
    assert cmp.failed and cmp.exit_code == 1
    assert any(m.axis == "run" and m.label == "unexplained" and m.out.max_ulp == 1 for m in cmp.mismatches)
    with pytest.raises(DetrunError, match="not reproducible on its own"):
        set_baseline(store, "bad")


def test_fingerprint_mismatch_names_fields(store):
    run_inline(store, small(**TINY), "base")
    run_inline(store, small(**TINY), "upgraded")
    set_baseline(store, "base")

    def upgrade(row):
        row["flashinfer"], row["torch"] = "0.6.8", "2.14.0"
        row["fingerprint"] = fingerprint_of(row)

    rewrite_rows(store, "upgraded", upgrade)
    flip_one_ulp(store, "upgraded", lambda r: r["case"] == "mixed" and r["request"] == "long")
    cmp = compare_with_baseline(store, "upgraded")
    context = cmp.baseline_context[0]
    assert "no baseline with this fingerprint" in context
    assert "flashinfer:  vs 0.6.8" in context and "torch: 2.13.0+cpu vs 2.14.0" in context
    run_axis = [m for m in cmp.mismatches if m.axis == "run"]
    assert run_axis and all(m.label == "explained by environment: torch" for m in run_axis)
    assert not any(v.axis == "run" and v.status == "differs" for v in cmp.verdicts)
    assert compare_with_baseline(store, "upgraded", Checks(strict=True)).failed


def test_baseline_spec_must_match(store):
    run_inline(store, small(**TINY), "base")
    run_inline(store, small(repeats=1, modes=["eager"], seed=8), "other")
    set_baseline(store, "base")
    with pytest.raises(DetrunError, match="differs in: seed"):
        compare_with_baseline(store, "other")


def test_no_baseline_is_said(store):
    run_inline(store, small(**TINY), "lonely")
    cmp = compare_with_baseline(store, "lonely")
    assert cmp.runs == ["lonely"] and "no baseline set" in cmp.baseline_context[0]


def test_plan_aware_verdicts(store):
    run_inline(store, small(reference={"variant": "split_kv", "kv_tile": 4}), "split")
    cmp = compare_runs(store, ["split"])
    batch = [v for v in cmp.verdicts if v.axis == "batch" and v.request == "target"][0]
    assert batch.status == "explained" and not cmp.failed
    assert any(m.label == "explained by plan: kv_chunk_size" for m in cmp.mismatches)
    assert compare_runs(store, ["split"], strict=True).exit_code == 1


def test_unexplained_differences_still_fail(store):
    run_inline(store, small(), "flip")
    run_inline(store, small(reference={"variant": "canary"}), "canary")
    flip_one_ulp(store, "flip", _target)
    for run in ("flip", "canary"):
        cmp = compare_runs(store, [run])
        assert cmp.exit_code == 1
        assert any(m.label == "unexplained" for m in cmp.mismatches)


def test_equal_despite_different_plans_is_noted(store):
    run_inline(store, small(**TINY), "run")

    def replan(row):
        if row["case"] == "mixed":
            row["plan"] = json.dumps(dict(json.loads(row["plan"]), kv_tile=128))

    rewrite_rows(store, "run", replan)
    cmp = compare_runs(store, ["run"])
    assert not cmp.failed
    assert any("although plans differ" in n and "plan.kv_tile: 64 vs 128" in n for n in cmp.notes)


def test_history_names_first_differing_run(store):
    ids = [run_inline(store, small(**TINY), f"night-{i}") for i in range(1, 6)]
    flip_one_ulp(store, ids[2], _target)
    hist = history(store)
    assert [r.run_id for r in hist.runs] == ids
    assert [r.verdict for r in hist.runs] == ["pass", "pass", "FAIL", "pass", "pass"]
    assert hist.runs[2].differs == 1 and hist.runs[0].rows == hist.runs[0].ok == 11
    assert [str(d) for d in hist.drifts] == [
        f"{hist.runs[0].job} alone/target/eager [{hist.runs[0].fingerprints[0]}]: first differs at run 3 "
        "(night-3), against run 1 (night-1)"]
