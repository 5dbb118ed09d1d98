"""compare over stored runs (made in-process, no Ray): passes, fails where it must, and explains differences
by the plan (not when strict)."""

import html
import json
import os

import pytest

from detrun.judge.compare import compare_runs
from detrun.judge.findings import judge
from tests.helpers import TINY, cli_main, drop_row, flip_one_ulp, is_alone_target, rewrite_rows, run_inline, small

FAST = dict(modes=["eager"], repeats=2)


def test_reproducible_run_passes(store):
    run_inline(store, small(**FAST), "r1", gpus=2)
    cmp = compare_runs(store, ["r1"])
    assert judge(cmp).exit_code == 0 and not cmp.missing
    status = {(v.request, v.axis): v.status for v in cmp.verdicts}
    assert status[("target", "repeat")] == status[("target", "gpu")] == status[("target", "batch")] == "equal"


def test_one_ulp_flip_fails_with_numbers(store):
    run_inline(store, small(**FAST), "r1")
    flipped = flip_one_ulp(store, "r1", lambda r: r["request"] == "target" and r["repeat"] == 1)
    cmp = compare_runs(store, ["r1"])
    assert judge(cmp).exit_code == 1
    m = next(m for m in cmp.mismatches if m.axis == "repeat")
    assert m.request == "target" and flipped["key"] in (m.a + m.b)
    assert (m.out.count, m.out.max_ulp, m.out.first_index) == (1, 1, (0, 0, 0))
    assert m.lse is None  # only the output was touched
    assert m.why == ["unexplained: same plan, path and environment"]


def test_missing_row_is_a_failure(store):
    run_inline(store, small(**FAST), "r1")
    gone = drop_row(store, "r1", lambda r: r["key"] == "mixed/long/eager/r0/g0")
    cmp = compare_runs(store, ["r1"])
    assert judge(cmp).exit_code == 1
    assert cmp.missing == [f"r1:{gone['key']}"]


def test_duplicate_rows_are_a_failure(store):
    run_inline(store, small(**FAST), "r1")
    rows = store.read_rows(["r1"]).to_pylist()
    store.write_rows("r1", "extra", rows[:1])
    assert compare_runs(store, ["r1"]).duplicates == [f"r1:{rows[0]['key']} x2"]


def test_canary_is_flagged(store):
    run_inline(store, small(reference={"variant": "canary"}, **FAST), "c1")
    cmp = compare_runs(store, ["c1"])
    assert judge(cmp).exit_code == 1
    assert any(v.axis == "repeat" and v.status == "differs" for v in cmp.verdicts)


def test_split_kv_differs_across_batches_and_says_why(store):
    run_inline(store, small(reference={"variant": "split_kv", "kv_tile": 4, "num_sms": 4}, **FAST), "s1")
    cmp = compare_runs(store, ["s1"])
    assert judge(cmp).exit_code == 0  # the plans differ: explained, not a failure ...
    assert judge(compare_runs(store, ["s1"], strict=True)).exit_code == 1  # ... unless strict
    status = {(v.request, v.axis): v.status for v in cmp.verdicts}
    assert status[("target", "repeat")] == "equal" and status[("target", "batch")] == "explained"
    m = next(m for m in cmp.mismatches if m.request == "target" and m.axis == "batch")
    assert any(w.startswith("plan.kv_chunk_size:") for w in m.why)
    assert m.out.count > 0 and m.out.max_ulp >= 1


def test_paged_and_ragged_runs_are_equal_without_a_prefix_and_explained_with_one(store):
    run_inline(store, small(**FAST), "paged")
    run_inline(store, small(env={"SGLANG_FLASHINFER_USE_PAGED": "0"}, **FAST), "ragged")
    cmp = compare_runs(store, ["paged", "ragged"])
    status = {(v.request, v.axis): v.status for v in cmp.verdicts}
    assert status[("target", "run")] == "equal"  # no prefix: paged and ragged agree bitwise
    assert status[("target_p", "run")] == "explained"  # ragged + paged prefix merges two partials
    m = next(m for m in cmp.mismatches if m.request == "target_p")
    assert "path: paged vs ragged+paged-prefix" in m.why


def test_cudagraph_on_cpu_is_skipped_not_passed(store):
    run_inline(store, small(modes=["eager", "cudagraph"], repeats=1), "g1")
    cmp = compare_runs(store, ["g1"])
    assert judge(cmp).exit_code == 0
    skipped = [s for s in cmp.not_run if "/cudagraph/" in s[0]]
    assert skipped and all(st == "skipped" and "needs a CUDA device" in why for _, st, why in skipped)
    assert all(v.status == "n/a" for v in cmp.verdicts if v.axis == "mode")


def test_unknown_run_is_a_usage_error(store):
    from detrun.errors import DetrunError

    with pytest.raises(DetrunError, match="no run 'nope'"):
        compare_runs(store, ["nope"])


def test_kernel_audit_fails_a_ragged_kernel_on_the_paged_path():
    from detrun.judge.audit import audit_kernels

    paged = "flashinfer::BatchPrefillWithPagedKVCacheKernel<128, 4>"
    ragged = "flashinfer::BatchPrefillWithRaggedKVCacheKernel<128, 4>"
    fa3_ragged = "flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<RaggedParams, 128>>"
    assert audit_kernels("paged", [paged, "Memset (Device)"]) is None
    assert "ragged kernel ran" in audit_kernels("paged", [paged, ragged])
    assert "ragged kernel ran" in audit_kernels("paged", [fa3_ragged])
    assert audit_kernels("ragged", [ragged]) is None
    assert audit_kernels("ragged", [paged]) == "path ragged but no ragged kernel ran"
    assert audit_kernels("ragged+paged-prefix", [ragged]) == "path ragged+paged-prefix but no paged kernel ran"
    assert audit_kernels("paged", ["reference.exact.paged"]) is None


def test_audit_failure_fails_compare(store):
    run_inline(store, small(**FAST), "a1")
    rows = store.read_rows(["a1"]).to_pylist()
    for r in rows:
        r["kernels"] = ["flashinfer::BatchPrefillWithRaggedKVCacheKernel<128>"]
    store.write_rows("a1", "g0-r0-1", rows)
    cmp = compare_runs(store, ["a1"])
    assert judge(cmp).exit_code == 1 and len(cmp.audit) == len(rows)


def test_without_stored_tensors_a_flip_still_fails_but_has_no_numbers(store):
    run_inline(store, small(store_tensors=False, **FAST), "n1")
    assert store.read_blob(["n1"], store.read_rows(["n1"]).to_pylist()[0]["out_digest"]) is None
    rows = store.read_rows(["n1"]).to_pylist()
    target = next(r for r in rows if r["request"] == "target" and r["repeat"] == 1)
    target["out_digest"] = "0" * 32  # a changed digest with no bytes behind it
    store.write_rows("n1", "g0-r0-1", rows)
    cmp = compare_runs(store, ["n1"])
    assert judge(cmp).exit_code == 1
    m = next(m for m in cmp.mismatches if m.request == "target")
    assert m.out is None and m.label == "unexplained"
    assert m.no_numbers == ["out: no numbers: run n1 stores no tensors (store_tensors: false)"]


@pytest.mark.parametrize("how", ["tampered", "deleted"])
def test_a_missing_blob_is_named_where_the_numbers_would_be(store, how, capsys, tmp_path):
    run_inline(store, small(**FAST), "t1")
    flipped = flip_one_ulp(store, "t1", lambda r: is_alone_target(r) and r["repeat"] == 1)
    digest = flipped["out_digest"]
    if how == "tampered":  # the row names a digest no blob has
        digest = "3fa2" + "0" * 28
        rewrite_rows(store, "t1", lambda r: r.update(out_digest=digest) if r["key"] == flipped["key"] else None)
    else:  # the blob file of the flipped row's digest is gone
        os.remove(os.path.join(store.base, "blobs", digest[:2], f"{digest}.bin"))
    cmp = compare_runs(store, ["t1"])
    m = next(m for m in cmp.mismatches if m.axis == "repeat" and m.request == "target")
    said = f"out: no numbers: blob {digest} missing under {store.root}/blobs"
    assert m.out is None and m.no_numbers == [said] and m.lse is None  # the lse blobs are there and equal
    code, out, _ = cli_main(capsys, "compare", "t1", "--runs-root", store.root)
    assert code == 1 and said in out
    report = tmp_path / "r.html"
    assert cli_main(capsys, "report", "t1", "--runs-root", store.root, "-o", str(report))[0] == 0
    assert html.escape(said) in report.read_text()


def test_a_batch_difference_under_another_plan_is_explained_and_fails_when_strict(store):
    run_inline(store, small(reference={"variant": "split_kv", "kv_tile": 4}), "split")
    cmp = compare_runs(store, ["split"])
    batch = [v for v in cmp.verdicts if v.axis == "batch" and v.request == "target"][0]
    assert batch.status == "explained" and not judge(cmp).failed
    assert any(m.label == "explained by plan: kv_chunk_size" for m in cmp.mismatches)
    assert judge(compare_runs(store, ["split"], strict=True)).exit_code == 1


def test_a_flipped_bit_or_the_canary_is_unexplained_and_fails(store):
    run_inline(store, small(), "flip")
    run_inline(store, small(reference={"variant": "canary"}), "canary")
    flip_one_ulp(store, "flip", is_alone_target)
    for run in ("flip", "canary"):
        cmp = compare_runs(store, [run])
        assert judge(cmp).exit_code == 1
        assert any(m.label == "unexplained" for m in cmp.mismatches)


def test_equal_bits_under_different_plans_pass_with_a_note(store):
    run_inline(store, small(**TINY), "run")

    def replan(row):
        if row["case"] == "mixed":
            row["plan"] = json.dumps(dict(json.loads(row["plan"]), kv_tile=128))

    rewrite_rows(store, "run", replan)
    cmp = compare_runs(store, ["run"])
    assert not judge(cmp).failed
    assert any("although plans differ" in n and "plan.kv_tile: 64 vs 128" in n for n in cmp.notes)
