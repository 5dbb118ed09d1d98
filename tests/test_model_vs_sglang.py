"""Model vs SGLang: rows of detrun's model (backend flashinfer) beside rows of SGLang's own backend (backend
sglang) of the same cells (they meet on the backend axis) are never explained by the backend name, SGLang's own
plan keys or its version: a difference on the same path and plan, or another path for the same cell, is a
`model_differs` failure, whatever the backend axis is claimed at."""

import json

from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from tests.helpers import flip_one_ulp, rewrite_rows, run_inline, small

JOB = dict(modes=["eager"], repeats=1)


def _as(backend: str, path=None):
    def change(r):
        r["backend"] = backend
        if backend == "sglang":  # SGLang's rows say what it ran (their wiring passes the audit unless moved)
            r["sglang"], r["use_paged"] = "0.5.23", True
            r["plan"] = json.dumps(dict(json.loads(r["plan"] or "{}"), **{"sglang.use_ragged": False}))
            r["wiring"] = json.dumps({"forward_mode": "EXTEND", "graph": None, "use_ragged": False,
                                      "extend_no_prefix": False, "planned": ["prefill_paged[0]"],
                                      "ran": ["prefill_paged[0]"], "stale": []})
        if path is not None and r["request"] == "target":
            r["path"] = path
    return change


def _pair(store, sglang_path=None):
    run_inline(store, small(**JOB), "model")
    run_inline(store, small(**JOB), "own")
    rewrite_rows(store, "model", _as("flashinfer"))
    rewrite_rows(store, "own", _as("sglang", sglang_path))


def _model_findings(cmp):
    return [f for f in judge(cmp).findings if f.kind == "model_differs"]


def test_equal_bits_of_the_model_and_sglang_pass(store):
    _pair(store)
    cmp = compare_runs(store, ["model", "own"])
    assert judge(cmp).exit_code == 0 and not _model_findings(cmp)
    assert all(v.status == "equal" for v in cmp.verdicts if v.axis == "backend" and v.groups)


def test_a_one_ulp_flip_on_the_same_path_and_plan_is_a_model_difference(store):
    _pair(store)
    flip_one_ulp(store, "own", lambda r: r["request"] == "target" and r["case"] == "alone")
    cmp = compare_runs(store, ["model", "own"])
    found = _model_findings(cmp)
    assert judge(cmp).exit_code == 1 and len(found) == 1
    assert found[0].cause == "model differs from SGLang 0.5.23: same path and plan"
    assert "model-vs-SGLang differences" in judge(cmp).headline
    m = next(m for m in cmp.mismatches if m.axis == "backend")  # they meet on backend, never on run
    assert m.label.startswith("unexplained") and m.out.max_ulp == 1


def test_another_path_for_the_same_cell_is_a_model_difference_not_an_explanation(store):
    _pair(store, sglang_path="ragged")
    flip_one_ulp(store, "own", lambda r: r["request"] == "target" and r["case"] == "alone")
    cmp = compare_runs(store, ["model", "own"])
    [found] = _model_findings(cmp)
    assert found.cause == "model differs from SGLang 0.5.23: the model took path paged, SGLang ran ragged"
    assert judge(cmp).exit_code == 1


def test_two_model_runs_on_other_paths_stay_explained(store):
    """The control: without SGLang's own rows a path difference explains a difference, as before."""
    run_inline(store, small(**JOB), "a")
    run_inline(store, small(**JOB), "b")
    rewrite_rows(store, "b", lambda r: r.update(path="ragged") if r["request"] == "target" else None)
    flip_one_ulp(store, "b", lambda r: r["request"] == "target" and r["case"] == "alone")
    cmp = compare_runs(store, ["a", "b"])
    assert not _model_findings(cmp)
    assert any(m.label == "explained by plan: path" for m in cmp.mismatches if m.axis == "run")


def test_a_model_difference_fails_whatever_the_backend_axis_is_claimed_at(store):
    _pair(store)
    flip_one_ulp(store, "own", lambda r: r["request"] == "target" and r["case"] == "alone")
    for level in ("ignore", "explained", "bitwise"):
        cmp = compare_runs(store, ["model", "own"], expect={"backend": level})
        verdict = judge(cmp)
        assert verdict.exit_code == 1 and len(_model_findings(cmp)) == 1, level
        assert {m.axis for m in cmp.mismatches} == {"backend", "batch"}  # the flip also splits own's cases
