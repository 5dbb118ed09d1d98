"""The wiring-audit grid: SGLang 0.5.23's real FlashInferAttnBackend, driven by backend sglang with recording
fake FlashInfer wrappers on CPU (tests/sglang_fakes.py), over flag x deterministic x forward mode x mode.

EXPECTED is written from SGLang's code (FB = srt/layers/attention/flashinfer_backend.py at 0.5.23), not from
detrun's: which wrappers SGLang plans for the batch, which it runs, and forward_metadata.use_ragged.
Needs `pip install --no-deps -r requirements/sglang-cpu.txt` (CI installs it; without CI=true a machine
without SGLang skips this file).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

if not os.environ.get("CI") and importlib.util.find_spec("sglang") is None:  # found, not imported: SGLang's
    pytest.skip("pip install --no-deps -r requirements/sglang-cpu.txt", allow_module_level=True)  # Triton
    # kernels must load after the backend set TRITON_INTERPRET

from detrun.judge.wiring import wiring_problems  # noqa: E402
from detrun.kernels import envinfo  # noqa: E402
from detrun.kernels.backends.base import SGLangVersionMismatch  # noqa: E402
from detrun.kernels.backends.sglang import SGLangBackend  # noqa: E402
from detrun.kernels.inputs import build_batch  # noqa: E402
from detrun.record.paths import PATH_DECODE, PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX  # noqa: E402
from detrun.spec.model import spec_from_dict  # noqa: E402
from tests.sglang_fakes import FakePaged, fake_api  # noqa: E402

pytestmark = pytest.mark.slow  # one SGLang import per process (10-60 s on 2 cores)

BLOCK = 4
# noprefix: one request, no cached prefix. prefix: two requests over cached prefixes (8 and 4 tokens);
# each has more new tokens than a dllm block, so a dllm forward has a prefix too.
SPEC = dict(name="wiring", heads={"qo": 4, "kv": 2}, head_dim=16, page_size=4, dtype="bf16",
            requests={"a": {"qo_len": 7}, "b": {"qo_len": 6, "prefix_len": 8}, "c": {"qo_len": 5, "prefix_len": 4}},
            cases={"noprefix": ["a"], "prefix": ["b", "c"]},
            flashinfer={"decode": {"capture_batch_sizes": [1, 2, 4]}})

R, P = "prefill_ragged", "prefill_paged[0]"  # the eager wrappers (FB:523-556)
FULL = "graph.full_prefill[0]"  # the plain-EXTEND full prefill graph's wrapper (FB:1249-1312, FB:1342-1348)
G2 = "graph.prefill_paged[0]@bs2"  # the DLLM_EXTEND graph's wrapper at capture size 2 (FB:1331-1336)
D, GD2 = "decode[0]", "graph.decode[0]@bs2"


def _eager_prefill(use_ragged: bool, prefix: bool):
    # FB:1058-1063 use_ragged; FB:2296-2305 plans ragged only when use_ragged, FB:2395 plans paged always;
    # FB:1397 paged forward, FB:1460 ragged alone without prefix, FB:1483-1503 ragged + paged prefix merged.
    if not use_ragged:
        return False, {P}, {P}, set()
    return True, {R, P}, ({R, P} if prefix else {R}), set()


ALL = [(f, d) for f in (False, True) for d in (False, True)]  # (flag, deterministic)
# (cell, mode) -> {(flag, deterministic): (use_ragged, planned, ran, stale)}
EXPECTED = {
    ("extend-noprefix", "eager"): {(f, d): _eager_prefill(not d and not f, False) for f, d in ALL},
    ("extend-prefix", "eager"): {(f, d): _eager_prefill(not d and not f, True) for f, d in ALL},
    ("dllm", "eager"): {(f, d): _eager_prefill(not d and not f, True) for f, d in ALL},
    # full prefill graph: use_ragged=False whatever the flag (FB:820-834 replay, FB:1348 capture)
    ("extend-noprefix", "cudagraph"): {(f, d): (False, {FULL}, {FULL}, set()) for f, d in ALL},
    ("extend-prefix", "cudagraph"): {(f, d): (False, {FULL}, {FULL}, set()) for f, d in ALL},
    # decode: the decode wrapper, eager (FB:1009-1023) and graph (FB:768-783; fast_decode_plan after capture)
    ("decode", "eager"): {(f, d): (None, {D}, {D}, set()) for f, d in ALL},
    ("decode", "cudagraph"): {(f, d): (None, {GD2}, {GD2}, set()) for f, d in ALL},
    # DLLM_EXTEND graph: capture sets PrefillMetadata(use_ragged=is_dllm_extend()=True) (FB:1335), so the
    # captured forward runs ragged + paged prefix (FB:1483-1503) with the flag off or on; out_graph plans
    # use_ragged=not self.use_paged (FB:802). Flag off: both planned. FLAG ON (SGLang 0.5.23 FINDING): only
    # the paged graph wrapper is planned, over the whole sequence, and the eager ragged wrapper runs without a
    # plan for this batch.
    ("dllm", "cudagraph"): {(False, d): (True, {R, G2}, {R, G2}, set()) for d in (False, True)}
    | {(True, d): (True, {G2}, {R, G2}, {R}) for d in (False, True)},
}
PATHS = {frozenset({P}): PATH_PAGED, frozenset({FULL}): PATH_PAGED, frozenset({R}): PATH_RAGGED,
         frozenset({R, P}): PATH_RAGGED_PREFIX, frozenset({R, G2}): PATH_RAGGED_PREFIX,
         frozenset({D}): PATH_DECODE, frozenset({GD2}): PATH_DECODE}
CELLS = {"extend-noprefix": ("noprefix", "forward"), "extend-prefix": ("prefix", "forward"),
         "decode": ("prefix", "forward_decode"), "dllm": ("prefix", "forward_dllm")}


def _spec(det: bool):
    return spec_from_dict(dict(SPEC, sglang={"version": "0.5.23", "deterministic_inference": det,
                                             "dllm_block_size": BLOCK}))


@pytest.fixture
def make(monkeypatch):
    built = []

    def build(flag: bool, det: bool) -> SGLangBackend:
        monkeypatch.setenv("SGLANG_FLASHINFER_USE_PAGED", "1" if flag else "0")
        be = SGLangBackend(_spec(det), torch.device("cpu"), wrappers=fake_api())
        built.append(be)
        return be

    yield build
    for be in built:
        be.close()


@pytest.mark.parametrize("flag", [False, True], ids=["flag-off", "flag-on"])
@pytest.mark.parametrize("det", [False, True], ids=["default", "deterministic"])
def test_the_grid_runs_what_sglang_code_says(make, flag, det):
    be = make(flag, det)
    assert (be.use_paged, be.deterministic) == (flag, det)  # read by SGLang itself (FB:453, FB:436)
    spec = be.spec
    batches = {case: build_batch(spec, case) for case in spec.cases}
    for (cell, mode), table in EXPECTED.items():
        case, method = CELLS[cell]
        out = getattr(be, method)(batches[case], mode)
        use_ragged, planned, ran, stale = table[(flag, det)]
        w = out.wiring
        where = f"{cell} {mode} flag={flag} det={det}: {w}"
        assert w["forward_mode"] == {"decode": "DECODE", "dllm": "DLLM_EXTEND"}.get(cell, "EXTEND"), where
        assert w["graph"] == (None if mode == "eager" else
                              {"decode": "decode", "dllm": "dllm"}.get(cell, "full-prefill")), where
        assert (w["use_ragged"], set(w["planned"]), set(w["ran"]), set(w["stale"])) == (
            use_ragged, planned, ran, stale), where
        assert out.path == PATHS[frozenset(ran)], where
        problems = wiring_problems(w, flag, det, mode, out.path, out.kernels)
        if stale:
            assert any("prefill_ragged ran without a plan for this batch" in p for p in problems), problems
            assert any("rule says use_ragged=False" in p for p in problems), problems
        else:
            assert problems == [], (where, problems)


def test_dllm_graph_with_the_flag_plans_the_paged_wrapper_over_the_whole_sequence(make):
    """The FINDING's second half: flag on, out_graph plans the graph's paged wrapper as if paged-only
    (kv over prefix and new tokens: use_ragged=False, FB:1963-1965), while the captured forward runs it
    as the non-causal prefix half of the merge (FB:1484-1503). Flag off, it is planned over the prefix only."""
    kv = {}
    for flag in (False, True):
        be = make(flag, False)
        batch = build_batch(be.spec, "prefix")
        be.forward_dllm(batch, "cudagraph")
        wrapper = be.sgl.prefill_cuda_graph_metadata[2][0]
        kv[flag] = wrapper.plans[-1]["indptr"][1][:3]
        be.close()
    seq = [8 + 6, 4 + 5]
    assert kv[True] == [0, seq[0], seq[0] + seq[1]]
    assert kv[False] == [0, seq[0] - BLOCK, seq[0] + seq[1] - 2 * BLOCK]


def test_outputs_are_what_sglang_returned_and_the_lse_of_what_ran(make):
    be = make(False, False)
    batch = build_batch(be.spec, "prefix")
    paged = make(True, False).forward(batch, "eager")  # the flag: paged alone (FakePaged: q * 0.5 + 1)
    q = batch.q.float()
    assert torch.equal(paged.out, (q * 0.5 + FakePaged.KIND).to(batch.q.dtype))
    assert torch.equal(paged.lse, q.sum(-1) + FakePaged.KIND)
    merged = be.forward(batch, "eager")  # ragged + paged prefix: the LSE SGLang's merge returned
    assert merged.path == PATH_RAGGED_PREFIX
    assert torch.equal(merged.lse, torch.logaddexp(q.sum(-1) + 2.0, q.sum(-1) + 1.0))
    rows = batch.qo_indptr[1:].long() - 1  # decode graph: two requests at capture size 2, no padding rows back
    dec = be.forward_decode(batch, "cudagraph")
    assert dec.out.shape[0] == 2 and torch.equal(dec.lse, q[rows].sum(-1) + 3.0)


def test_negative_control_a_wrapper_run_on_another_batch_s_plan_fails_the_audit(make, monkeypatch):
    be = make(False, False)
    first, second = build_batch(be.spec, "noprefix"), build_batch(be.spec, "prefix")
    be.forward(first, "eager")
    # The fault: SGLang's metadata call plans nothing for the next batch; its wrappers keep the first's plan.
    monkeypatch.setattr(be.sgl, "init_forward_metadata", lambda fb: None)
    out = be.forward(second, "eager")
    assert out.wiring["planned"] == [] and out.wiring["stale"] == [R]
    problems = wiring_problems(out.wiring, False, False, "eager", out.path, out.kernels)
    assert any("prefill_ragged ran without a plan for this batch" in p for p in problems), problems


def test_negative_control_one_wrapper_planned_and_another_run_fails_the_audit(make, monkeypatch):
    be = make(True, False)
    batch = build_batch(be.spec, "prefix")
    real = be.sgl.init_forward_metadata

    def planned_then_swapped(fb):  # the fault: forward runs the verify wrappers, not the ones planned
        real(fb)
        be.sgl.forward_metadata.prefill_wrappers = be.sgl.prefill_wrappers_verify

    monkeypatch.setattr(be.sgl, "init_forward_metadata", planned_then_swapped)
    out = be.forward(batch, "eager")
    assert out.wiring["stale"] == ["verify[0]"]
    assert wiring_problems(out.wiring, True, False, "eager", out.path, out.kernels)


def test_a_different_installed_sglang_is_an_environment_error(make, monkeypatch):
    monkeypatch.setattr(envinfo, "installed_sglang", lambda: "0.5.22")
    expected = (r"^backend sglang: the job names SGLang 0\.5\.23 but SGLang 0\.5\.22 is installed in the task's "
                r"environment$")
    with pytest.raises(SGLangVersionMismatch, match=expected):
        make(False, False)


def test_a_second_backend_in_the_process_gets_its_own_workspace_size(make, monkeypatch):
    monkeypatch.delenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", raising=False)
    make(False, True)  # deterministic inference sets the flag to 2 GiB (FB:451)
    assert os.environ["SGLANG_FLASHINFER_WORKSPACE_SIZE"] == str(2048 << 20)
    be = make(False, False)
    assert "SGLANG_FLASHINFER_WORKSPACE_SIZE" not in os.environ
    assert be.sgl.workspace_buffer.numel() == 384 << 20  # SGLang's default (environ.py:1221), not 2 GiB


def test_the_injected_wiring_fault_runs_the_paged_wrapper_where_sglang_set_up_ragged(make, monkeypatch):
    """DETRUN_TEST_SGLANG_WIRING=flip-ragged (the run-level negative control of scripts/gpu_sglang_own.sh): the
    flag off, SGLang sets an eager prefill up ragged; the fault makes its paged wrapper (planned for the prefix
    only) run alone, and the audit says so. Without the fault the same cell is clean."""
    be = make(False, False)
    batch = build_batch(be.spec, "prefix")
    clean = be.forward(batch, "eager")
    assert clean.path == PATH_RAGGED_PREFIX
    assert not wiring_problems(clean.wiring, False, False, "eager", clean.path, [])
    monkeypatch.setenv("DETRUN_TEST_SGLANG_WIRING", "flip-ragged")
    out = be.forward(batch, "eager")
    problems = wiring_problems(out.wiring, False, False, "eager", out.path, [])
    assert out.path == PATH_PAGED and out.wiring["use_ragged"] is False
    assert any("path paged, but SGLang 0.5.23's rule says use_ragged=True" in p for p in problems), problems
    assert any("forward_metadata.use_ragged=False, but the rule says True" in p for p in problems), problems
