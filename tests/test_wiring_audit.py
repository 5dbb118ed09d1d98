"""The wiring audit in compare: backend sglang's rows are checked against SGLang's rule for their forward mode,
the flag as the task had it and the job's deterministic switch; a wrapper run without a plan for its batch, a
flag SGLang read otherwise or a row without its wiring fails the verdict (exit 1) and shows in every presenter.
(The rule itself and SGLang's real wiring: tests/test_wiring_rule.py, tests/test_sglang_wiring.py.)"""

import json

from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from tests.helpers import junit_text, rewrite_rows, run_inline, small, terminal_text

JOB = dict(modes=["eager"], repeats=1)  # the flag on (small's env): SGLang's eager EXTEND runs paged


def _wiring(stale=()):
    ran = ["prefill_paged[0]", *stale]
    return {"forward_mode": "EXTEND", "graph": None, "use_ragged": False, "extend_no_prefix": False,
            "planned": ["prefill_paged[0]"], "ran": ran, "stale": list(stale)}


def _sglang_run(store, change=lambda r: None):
    run_inline(store, small(**JOB), "own")

    def as_sglang(r):
        r.update(backend="sglang", sglang="0.5.23", wiring=json.dumps(_wiring()), use_paged=True)
        change(r)
    rewrite_rows(store, "own", as_sglang)
    return compare_runs(store, ["own"])


def _target_alone(r):
    return r["request"] == "target" and r["case"] == "alone"


def test_rows_wired_as_sglang_s_rule_says_pass(store):
    cmp = _sglang_run(store)
    assert not cmp.wiring and judge(cmp).exit_code == 0


def test_a_wrapper_run_without_a_plan_for_its_batch_fails_in_every_presenter(store):
    def stale(r):
        if _target_alone(r):
            r["wiring"] = json.dumps(_wiring(stale=["prefill_ragged"]))
    cmp = _sglang_run(store, stale)
    verdict = judge(cmp)
    assert verdict.exit_code == 1
    [line] = [w for w in cmp.wiring if "ran without a plan" in w]
    assert line.startswith("own:alone/target/eager/r0/g0: EXTEND eager: wrapper prefill_ragged ran without a plan")
    # the same row's path (paged) also disagrees with what ran (paged and ragged): two problems
    assert any("the row says path paged but the wrappers that ran are prefill_paged[0], prefill_ragged" in w
               for w in cmp.wiring)
    assert "2 wiring audit failures" in verdict.headline
    assert line in terminal_text(verdict) and line in junit_text(verdict)


def _fails_with(store, change, problem):
    """A run whose target-alone row `change` alters: exit 1, and a wiring line that says `problem`."""
    def one(r):
        if _target_alone(r):
            change(r)
    cmp = _sglang_run(store, one)
    assert judge(cmp).exit_code == 1
    assert any(problem in w for w in cmp.wiring), cmp.wiring


def test_sglang_reading_the_flag_otherwise_than_the_task_had_it_fails(store):
    _fails_with(store, lambda r: r.update(use_paged=False),
                "SGLang read SGLANG_FLASHINFER_USE_PAGED as False, the task's environment had it True")


def test_a_ragged_run_where_the_flag_says_paged_breaks_the_rule(store):
    wiring = json.dumps(dict(_wiring(), use_ragged=True, planned=["prefill_ragged"], ran=["prefill_ragged"]))
    _fails_with(store, lambda r: r.update(path="ragged", wiring=wiring),
                "path ragged, but SGLang 0.5.23's rule says use_ragged=False (flag on, deterministic off)")


def test_an_sglang_row_without_its_wiring_fails(store):
    _fails_with(store, lambda r: r.update(wiring=""), "no wiring recorded")
