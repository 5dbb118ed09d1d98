"""judge/wiring.py without SGLang: the rule table as SGLang 0.5.23's code reads, and each kind of problem the
wiring audit reports (the grid over SGLang's real code is tests/test_sglang_wiring.py)."""

import pytest

from detrun.judge.wiring import sglang_rule, wiring_problems
from detrun.record.paths import PATH_DECODE, PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX, path_of

PAGED_K = "flashinfer::BatchPrefillWithPagedKVCacheKernel<...>"
RAGGED_K = "flashinfer::BatchPrefillWithRaggedKVCacheKernel<...>"


@pytest.mark.parametrize("fm", ["EXTEND", "DLLM_EXTEND"])
def test_eager_rule_is_neither_deterministic_nor_the_flag(fm):
    got = {(f, d): sglang_rule("0.5.23", fm, "eager", f, d) for f in (False, True) for d in (False, True)}
    assert got == {(False, False): True, (False, True): False, (True, False): False, (True, True): False}


def test_graph_rules_dllm_reads_only_the_flag_extend_is_paged_decode_has_none():
    for d in (False, True):
        assert sglang_rule("0.5.23", "DLLM_EXTEND", "cudagraph", False, d) is True
        assert sglang_rule("0.5.23", "DLLM_EXTEND", "cudagraph", True, d) is False
        assert sglang_rule("0.5.23", "EXTEND", "cudagraph", False, d) is False
        assert sglang_rule("0.5.23", "DECODE", "eager", True, d) is None
    with pytest.raises(ValueError, match="no wiring rule read for SGLang 0.5.10"):
        sglang_rule("0.5.10", "EXTEND", "eager", False, False)


def test_path_of_the_wrappers_that_ran():
    assert path_of(["prefill_ragged"]) == PATH_RAGGED
    assert path_of(["prefill_ragged", "graph.prefill_paged[0]@bs2"]) == PATH_RAGGED_PREFIX
    assert path_of(["graph.full_prefill[0]"]) == PATH_PAGED
    assert path_of(["graph.decode[0]@bs4"]) == PATH_DECODE


def _wiring(**kw):
    base = {"forward_mode": "EXTEND", "graph": None, "use_ragged": True, "extend_no_prefix": False,
            "planned": ["prefill_ragged", "prefill_paged[0]"], "ran": ["prefill_ragged", "prefill_paged[0]"],
            "stale": []}
    return {**base, **kw}


def test_a_consistent_row_has_no_problem():
    assert wiring_problems(_wiring(), False, False, "eager", PATH_RAGGED_PREFIX, [RAGGED_K, PAGED_K]) == []


def test_a_wrapper_run_without_a_plan_is_a_problem():
    w = _wiring(planned=["prefill_paged[0]"], stale=["prefill_ragged"])
    problems = wiring_problems(w, False, False, "eager", PATH_RAGGED_PREFIX, [])
    assert problems == ["EXTEND eager: wrapper prefill_ragged ran without a plan for this batch (planned: "
                        "prefill_paged[0])"]


def test_a_path_against_the_rule_is_a_problem():
    problems = wiring_problems(_wiring(), True, False, "eager", PATH_RAGGED_PREFIX, [])
    assert any("rule says use_ragged=False (flag on, deterministic off)" in p for p in problems), problems
    assert any("forward_metadata.use_ragged=True, but the rule says False" in p for p in problems), problems


def test_wrappers_that_do_not_make_the_row_s_path_are_a_problem():
    w = _wiring(use_ragged=False, planned=["prefill_paged[0]"], ran=["prefill_ragged"])
    problems = wiring_problems(w, True, False, "eager", PATH_PAGED, [])
    assert problems == ["EXTEND eager: the row says path paged but the wrappers that ran are prefill_ragged"]


def test_kernels_that_do_not_fit_the_wrappers_that_ran_are_a_problem():
    w = _wiring(use_ragged=False, planned=["prefill_paged[0]"], ran=["prefill_paged[0]"])
    assert wiring_problems(w, True, False, "eager", PATH_PAGED, [PAGED_K]) == []
    problems = wiring_problems(w, True, False, "eager", PATH_PAGED, [PAGED_K, RAGGED_K])
    assert len(problems) == 1 and "path paged but a ragged kernel ran" in problems[0]


def test_a_graph_cell_sglang_ran_eager_follows_the_eager_rule():
    w = _wiring(forward_mode="DLLM_EXTEND")  # graph None: SGLang's runner ran it eager
    assert wiring_problems(w, False, False, "cudagraph", PATH_RAGGED_PREFIX, []) == []
    assert wiring_problems(w, False, True, "cudagraph", PATH_RAGGED_PREFIX, []) != []
