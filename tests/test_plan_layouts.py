"""FlashInfer plan layouts per version: both read versions' vectors give the right fields, a layout detrun
does not know gives plan_unknown (never a partial plan), and compare treats such rows as unexplained:
a difference they take part in fails, equal bits pass, and the finding reaches every presenter."""

import json
import types
import xml.etree.ElementTree as ET
from html import escape

import pytest
import torch
from rich.console import Console

from detrun.judge.compare import compare_runs
from detrun.judge.findings import FAIL, WARN, judge
from detrun.judge.history import history
from detrun.kernels.backends.flashinfer import FlashInferBackend
from detrun.kernels.backends.plan_layouts import (
    DECODE,
    DECODE_PLAN_FIELDS,
    FA2_PLAN_FIELDS,
    FA2_PREFILL,
    FA3_PLAN_FIELDS,
    FA3_PREFILL,
    PLAN_UNKNOWN,
    read_plan,
)
from detrun.present.junit import junit_xml
from detrun.present.render import print_history
from detrun.present.report import build_report
from tests.helpers import cli_main, flip_one_ulp, junit_text, rewrite_rows, run_inline, small, terminal_text

VERSIONS = ("0.6.7.post3", "0.7.2.post1")
SPLIT = dict(reference={"variant": "split_kv", "kv_tile": 4}, repeats=2)
CHUNK_AT = 4096  # kv_chunk_size_ptr_offset in the fake vectors: the pinned int workspace holds 512 there


def vector(fields, **values):
    """A plan vector of this layout: the named values, every other field (offsets) a distinct number."""
    return [values.get(name, 1000 + i) for i, name in enumerate(fields)]


def read_int32(offset):
    assert offset == CHUNK_AT, offset  # read where the layout says kv_chunk_size was written
    return 512


@pytest.mark.parametrize("version", VERSIONS)
def test_both_versions_read_to_the_same_named_fields(version):
    fa2 = vector(FA2_PLAN_FIELDS, padded_batch_size=132, total_num_rows=300, cta_tile_q=64,
                 kv_chunk_size_ptr_offset=CHUNK_AT, enable_cuda_graph=1, split_kv=1)
    assert read_plan(FA2_PREFILL, version, fa2, read_int32) == {
        "padded_batch_size": 132, "total_num_rows": 300, "cta_tile_q": 64, "enable_cuda_graph": 1,
        "split_kv": 1, "kv_chunk_size": 512}
    assert read_plan(FA3_PREFILL, version, vector(FA3_PLAN_FIELDS)) == {}  # offsets and placement only
    decode = vector(DECODE_PLAN_FIELDS, padded_batch_size=8, kv_chunk_size_ptr_offset=CHUNK_AT,
                    enable_cuda_graph=0, split_kv=1)
    assert read_plan(DECODE, version, decode, read_int32) == {
        "padded_batch_size": 8, "enable_cuda_graph": 0, "split_kv": 1, "kv_chunk_size": 512}


@pytest.mark.parametrize("kind, version, values, why", [
    (FA2_PREFILL, "0.7.2.post1", 16, "fa2_prefill plan of 16 values from flashinfer 0.7.2.post1: its layout has 15"),
    (FA2_PREFILL, "0.6.7.post3", 9, "fa2_prefill plan of 9 values from flashinfer 0.6.7.post3: its layout has 15"),
    (FA3_PREFILL, "0.7.2.post1", 15, "fa3_prefill plan of 15 values from flashinfer 0.7.2.post1: its layout has 9"),
    (DECODE, "0.6.7.post3", 0, "decode plan of 0 values from flashinfer 0.6.7.post3: its layout has 10"),
    (FA2_PREFILL, "0.8.0", 15, "fa2_prefill plan of 15 values from flashinfer 0.8.0: no layout known"),
    (FA2_PREFILL, "0.6.6", 15, "fa2_prefill plan of 15 values from flashinfer 0.6.6: no layout known"),
    ("cudnn_prefill", "0.7.2.post1", 15, "cudnn_prefill plan of 15 values from flashinfer 0.7.2.post1: no layout"),
])
def test_a_layout_it_does_not_know_is_plan_unknown_never_a_partial_plan(kind, version, values, why):
    plan = read_plan(kind, version, list(range(values)), read_int32)
    assert list(plan) == [PLAN_UNKNOWN] and plan[PLAN_UNKNOWN].startswith(why), plan


def test_backend_records_the_plan_and_the_pinned_kv_chunk_size():
    pinned = torch.zeros(8192, dtype=torch.uint8)
    pinned[CHUNK_AT:CHUNK_AT + 4] = torch.tensor([384], dtype=torch.int32).view(torch.uint8)
    w = types.SimpleNamespace(_backend="fa2", _pin_memory_int_workspace_buffer=pinned,
                              _plan_info=vector(FA2_PLAN_FIELDS, kv_chunk_size_ptr_offset=CHUNK_AT, cta_tile_q=128))
    plan = FlashInferBackend.plan_of(w, "0.7.2.post1")
    assert plan["backend"] == "fa2" and plan["cta_tile_q"] == 128 and plan["kv_chunk_size"] == 384
    w._plan_info = w._plan_info + [0]  # a layout that grew a field
    assert FlashInferBackend.plan_of(w, "0.7.2.post1") == {
        "backend": "fa2", PLAN_UNKNOWN: "fa2_prefill plan of 16 values from flashinfer 0.7.2.post1: its layout has 15"}
    assert PLAN_UNKNOWN in FlashInferBackend.plan_of(types.SimpleNamespace(_backend="fa3", _plan_info=None), "0.7.2")


WHY = "fa2_prefill plan of 16 values from flashinfer 0.8.0: no layout known"


def unknown(match=lambda r: True):
    def change(row):
        if match(row):
            row["plan"] = json.dumps({PLAN_UNKNOWN: WHY})
    return change


def _presenters(store, verdict):
    """Terminal, JUnit, HTML and the history line of run `b` all show the plan_unknown finding."""
    (found,) = verdict.of("plan_unknown")
    assert found.severity == WARN and found.title.endswith(f"rows with a plan detrun cannot read: {WHY}")
    assert found.title in terminal_text(verdict) and found.title in junit_text(verdict)
    assert escape(found.title) in build_report(verdict)
    (b,) = [r for r in history(store).runs if r.run_id == "b"]
    console = Console(record=True, width=400, color_system=None)
    print_history(history(store), console)
    assert b.counts["plan_unknown"] == 1  # findings of the kind: one per reason
    assert f"plan_unknown={b.counts['plan_unknown']}" in next(
        ln for ln in console.export_text().splitlines() if " b " in ln)
    return found


def test_rows_with_unknown_plans_that_differ_fail_in_every_presenter(store, capsys):
    run_inline(store, small(repeats=1, modes=["eager"]), "a")
    run_inline(store, small(repeats=1, modes=["eager"]), "b")
    rewrite_rows(store, "b", unknown())
    flip_one_ulp(store, "b", lambda r: r["key"] == "alone/target/eager/r0/g0")
    cmp = compare_runs(store, ["a", "b"], expect={"run": "explained"})
    verdict = judge(cmp)
    found = _presenters(store, verdict)
    assert len(found.items) == 11 and "b:alone/target/eager/r0/g0" in found.items
    differs = {f.axis: f for f in verdict.of("differs")}  # plans differ (a's read, b's not): no explanation
    assert set(differs) == {"run", "batch"} and differs["run"].request == "target"
    assert differs["run"].severity == FAIL and differs["run"].cause == "unexplained"
    labels = {m.axis: m for m in cmp.mismatches}
    assert labels["run"].label == f"unexplained (plan unknown: {WHY})" and not labels["run"].explained
    assert labels["batch"].why == [f"unexplained: same path and environment, plans unknown ({WHY})"]
    assert {f.axis for f in verdict.of("broken_claim")} == {"batch", "run"} and verdict.exit_code == 1
    root = ET.fromstring(junit_xml(verdict))
    assert int(root.get("failures")) == len([f for f in verdict.findings if f.severity == FAIL])
    code, out, _ = cli_main(capsys, "compare", "a", "b", "--runs-root", store.root)
    assert code == 1 and "plan unknown" in out


def test_equal_bits_with_unknown_plans_pass_but_the_finding_is_shown(store):
    run_inline(store, small(repeats=1, modes=["eager"]), "a")
    run_inline(store, small(repeats=1, modes=["eager"]), "b")
    rewrite_rows(store, "b", unknown())
    cmp = compare_runs(store, ["a", "b"])
    verdict = judge(cmp)
    found = _presenters(store, verdict)
    assert verdict.exit_code == 0 and not verdict.of("differs") and len(found.items) == 11
    assert not cmp.notes  # not "equal although plans differ": an unknown plan is not known to differ
    assert "warnings: 11 plan unknown" in verdict.headline and "not checked" not in verdict.headline


def test_an_unknown_plan_no_longer_explains_a_batch_difference(store):
    run_inline(store, small(modes=["eager"], **SPLIT), "b")  # batch differences explained by kv_chunk_size
    before = judge(compare_runs(store, ["b"]))
    assert before.exit_code == 0 and before.of("explained") and not before.of("differs")
    rewrite_rows(store, "b", unknown(lambda r: r["case"] == "mixed"))
    after = judge(compare_runs(store, ["b"]))
    assert after.exit_code == 1 and {f.axis for f in after.of("differs")} == {"batch"}
    assert {f.request for f in after.of("differs")} == {"target"}  # target is in alone and mixed
    assert all(k.startswith("b:mixed/") for k in after.of("plan_unknown")[0].items)
