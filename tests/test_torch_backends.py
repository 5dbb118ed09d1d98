"""The trainer-side backends on the CPU (sdpa math and flash, flex eager) through a real task: prefill with
prefixes and decode, bitwise stable across repeats, close to the reference backend's exact attention; the
reference error filled and plausible; the kernel audit catches a torch row whose kernels are not the pinned
kernel's; two runs of one job on different backends line up row for row."""

import importlib.util
import json
import os

import pytest
import torch

from detrun.judge.audit import audit_kernels
from detrun.judge.compare import compare_runs
from detrun.kernels.backends.base import BackendUnavailable, Unsupported
from detrun.kernels.backends.reference import ReferenceBackend
from detrun.kernels.backends.sdpa import SdpaBackend
from detrun.kernels.inputs import build_batch
from detrun.kernels.referror import errors, ulp_of
from detrun.run.worker import resolve_backend
from detrun.spec.model import spec_from_dict
from tests.helpers import (
    ROOT,
    TINY,
    flip_one_ulp,
    is_alone_target,
    job_file,
    rewrite_rows,
    run_inline,
    small,
    stored_tensor,
)

PHASES = {"phases": ["prefill", "decode"], "repeats": 2, "modes": ["eager"]}


def _rows(store, run_id):
    return store.read_rows([run_id]).to_pylist()


def _by_key(rows, status="ok"):
    return {r["key"]: r for r in rows if r["status"] == status}


@pytest.mark.parametrize("backend, opts, attn", [("sdpa", {"sdpa": {"kernel": "math"}}, "sdpa-math"),
                                                  ("sdpa", {"sdpa": {"kernel": "flash"}}, "sdpa-flash"),
                                                  ("flex", {}, "flex-eager")])
def test_a_torch_backend_runs_a_job_bitwise_stable_across_repeats(store, backend, opts, attn):
    run_inline(store, small(backend=backend, **PHASES, **opts), "t")
    rows = _rows(store, "t")
    assert {r["status"] for r in rows} == {"ok"} and {r["attn"] for r in rows} == {attn}
    assert {r["phase"] for r in rows} == {"prefill", "decode"} and {r["backend"] for r in rows} == {backend}
    by_cell = {}
    for r in rows:
        by_cell.setdefault((r["case"], r["request"], r["phase"]), set()).add((r["out_digest"], r["lse_digest"]))
    assert all(len(v) == 1 for v in by_cell.values()), "a repeat changed bits"
    assert any(r["kernels"] for r in rows)  # the first cell of each (path, plan) records what ran
    plan = json.loads(rows[0]["plan"])
    assert plan["kernel"] == (opts.get("sdpa", {}).get("kernel") or "flex")
    cmp = compare_runs(store, ["t"])
    assert not cmp.audit


def test_sdpa_math_is_within_a_bf16_rounding_of_the_exact_reference(monkeypatch):
    spec = spec_from_dict(small(backend="sdpa", sdpa={"kernel": "math"}))
    cpu = torch.device("cpu")
    sdpa, ref = SdpaBackend(spec, cpu), ReferenceBackend(spec, cpu)
    for case in ("mixed", "prefix_shared", "mixed_decode"):
        batch = build_batch(spec, case)
        for a, b in ((sdpa.forward(batch, "eager"), ref.forward(batch, "eager")),
                     (sdpa.forward_decode(batch, "eager"), ref.forward_decode(batch, "eager"))):
            assert a.out.shape == b.out.shape and a.lse.shape == b.lse.shape
            # both round an fp32 result to bf16 once: at most one bf16 ULP apart
            assert (a.out.float() - b.out.float()).abs().le(ulp_of(b.out.float(), torch.bfloat16)).all()
            assert (a.lse - b.lse).abs().max().item() < 1e-5


def test_a_cuda_graph_cell_on_the_cpu_is_skipped_with_the_reason():
    spec = spec_from_dict(small(backend="sdpa", sdpa={"kernel": "math"}))
    with pytest.raises(Unsupported, match="cudagraph mode needs a CUDA device"):
        SdpaBackend(spec, torch.device("cpu")).forward(build_batch(spec, "alone"), "cudagraph")


def test_a_kernel_the_device_lacks_is_refused_naming_it():
    spec = spec_from_dict(small(backend="sdpa", sdpa={"kernel": "cudnn"}))
    assert resolve_backend(spec, has_cuda=False) == ("sdpa", "")
    with pytest.raises(BackendUnavailable, match="kernel cudnn needs a CUDA device"):
        SdpaBackend(spec, torch.device("cpu"))


def test_reference_error_of_bf16_rows_against_fp64_is_above_zero_and_below_a_bf16_bound(store):
    run_inline(store, small(backend="sdpa", sdpa={"kernel": "math"}, reference_error="fp64", **PHASES), "e")
    rows = [r for r in _rows(store, "e") if r["status"] == "ok"]
    for r in rows:
        err = json.loads(r["ref_error"])
        assert err["reference"] == "fp64-cpu"
        # bf16 output: nonzero, within a couple of bf16 ULPs (eps 2**-8 relative per rounding)
        assert 0 < err["out"]["max_abs"] < 2e-2 and 0 < err["out"]["max_ulp"] <= 2.0
        assert 0 < err["lse"]["max_abs"] < 1e-4
    # the error recomputed here from the stored tensor and an fp64 attention of this test's own
    row = next(r for r in rows if r["case"] == "alone" and r["phase"] == "prefill")
    batch = build_batch(spec_from_dict(small()), "alone")
    q, k, v = batch.q.double(), batch.k.double().repeat_interleave(2, 1), batch.v.double().repeat_interleave(2, 1)
    s = torch.einsum("nhd,thd->nht", q, k) / 32 ** 0.5
    s = s.masked_fill(torch.ones(q.shape[0], q.shape[0], dtype=torch.bool).triu(1)[:, None, :], float("-inf"))
    ref = torch.einsum("nht,thd->nhd", torch.softmax(s, -1), v)
    got = stored_tensor(store, "e", row).double()
    assert json.loads(row["ref_error"])["out"]["max_abs"] == pytest.approx((got - ref).abs().max().item(), rel=1e-9)


def test_an_fp32_reference_on_the_device_is_named_and_fp32_rows_sit_far_below_a_bf16_rounding(store):
    run_inline(store, small(backend="sdpa", sdpa={"kernel": "math"}, reference_error="fp32", dtype="fp32", **TINY), "f")
    errs = [json.loads(r["ref_error"]) for r in _rows(store, "f")]
    assert {e["reference"] for e in errs} == {"fp32"}
    assert max(e["out"]["max_abs"] for e in errs) < 1e-5  # fp32 rows: far below a bf16 rounding


def test_without_reference_error_the_column_is_empty(store):
    run_inline(store, small(backend="sdpa", sdpa={"kernel": "math"}, **TINY), "n")
    assert {r["ref_error"] for r in _rows(store, "n")} == {""}


def test_ulps_and_errors_count_in_the_rows_dtype():
    ref = torch.tensor([1.0, 0.0, -3.0], dtype=torch.float64)
    assert ulp_of(ref, torch.bfloat16).tolist() == [2 ** -7, 2.0 ** -133, 2 ** -6]
    got = torch.tensor([1.0 + 2 ** -7, 0.0, -3.0], dtype=torch.bfloat16)  # one bf16 ULP off at 1.0
    e = errors(got, ref)
    assert e == {"max_abs": 2 ** -7, "max_rel": 2 ** -7, "max_ulp": 1.0}


def test_the_audit_fails_a_torch_row_whose_kernels_are_not_the_pinned_kernel(store):
    flash_cuda = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>(Params)"
    cudnn = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0"
    eff = "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)"
    assert audit_kernels("paged", [flash_cuda], "sdpa-flash") is None
    assert audit_kernels("paged", [cudnn], "sdpa-cudnn") is None
    assert "a sdpa-flash kernel ran" in audit_kernels("paged", [flash_cuda], "sdpa-cudnn")
    assert "a sdpa-efficient kernel ran" in audit_kernels("decode", [eff], "sdpa-flash")
    assert "no sdpa-flash kernel ran" in audit_kernels("paged", ["ampere_bf16_s16816gemm_bf16_128x64"], "sdpa-flash")
    assert "a sdpa-math kernel ran" in audit_kernels("paged", [flash_cuda, "cunn_SoftMaxForward"], "sdpa-flash")
    assert "a sdpa-flash kernel ran" in audit_kernels("paged", [flash_cuda, "gemm"], "sdpa-math")
    assert audit_kernels("decode", ["triton_tem_fused_0", "triton_poi_fused_1"], "flex") is None
    assert "no Triton kernel ran" in audit_kernels("decode", ["cunn_SoftMaxForward", "gemm"], "flex")
    assert "a sdpa-flash kernel ran" in audit_kernels("paged", [flash_cuda], "flex")
    # a real run: torch's CPU math recorded, then one row's list tampered to the CPU flash op
    run_inline(store, small(backend="sdpa", sdpa={"kernel": "math"}, **TINY), "a")
    assert not compare_runs(store, ["a"]).audit
    tampered = []

    def swap(row):
        if row["kernels"] and not tampered:
            row["kernels"] = ["aten::_scaled_dot_product_flash_attention_for_cpu"]
            tampered.append(row["key"])

    rewrite_rows(store, "a", swap)
    audit = compare_runs(store, ["a"]).audit
    assert len(audit) == 1 and tampered[0] in audit[0] and "pinned sdpa-math but a sdpa-flash kernel ran" in audit[0]


def test_runs_of_one_job_on_different_backends_line_up_row_for_row(store):
    job = dict(**PHASES)
    for run_id, backend, extra in (("ref", "reference", {}), ("math", "sdpa", {"sdpa": {"kernel": "math"}}),
                                   ("flex", "flex", {})):
        run_inline(store, small(backend=backend, **job, **extra), run_id)
    keys = [set(_by_key(_rows(store, r))) for r in ("ref", "math", "flex")]
    assert keys[0] == keys[1] == keys[2] and len(keys[0]) == 2 * 2 * 11  # (prefill, decode) x 2 repeats x 11 rows
    shapes = [{k: (r["out_shape"], r["lse_shape"]) for k, r in _by_key(_rows(store, x)).items()}
              for x in ("ref", "math")]
    assert shapes[0] == shapes[1]



def _parity_script():
    found = importlib.util.spec_from_file_location("parity", ROOT / "scripts" / "parity.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_the_parity_script_finds_a_pair_bitwise_and_a_one_ulp_flip_in_a_copy(store, capsys):
    parity = _parity_script()
    job = small(backend="sdpa", sdpa={"kernel": "math"}, reference_error="fp64", **TINY)
    run_inline(store, job, "a")
    run_inline(store, job, "b")
    run_inline(store, small(backend="reference", **TINY), "r")
    rows = {r: parity._ok_rows(store, r) for r in "abr"}
    same = parity.pair_stats(store, "a", "b", rows["a"], rows["b"])
    assert same["rows"] == same["bitwise_rows"] == 11 and same["out"]["max_ulp"] == 0
    flip_one_ulp(store, "b", is_alone_target)
    rows["b"] = parity._ok_rows(store, "b")
    flipped = parity.pair_stats(store, "a", "b", rows["a"], rows["b"])
    assert flipped["bitwise_rows"] == 10 and flipped["out"]["differing_rows"] == 1
    assert flipped["out"]["max_ulp"] == 1 and flipped["lse"]["differing_rows"] == 0
    assert parity.ref_summary(rows["r"]) == {}  # the reference run stored no reference error
    worst = parity.ref_summary(rows["a"])
    assert worst["reference"] == "fp64-cpu" and 0 < worst["out"]["max_abs"] < 2e-2


def test_parity_run_resume_keeps_a_complete_run_and_redoes_one_a_kill_left(store, tmp_path, capsys):
    parity, job = _parity_script(), job_file(tmp_path, backend="reference", **TINY)
    run_inline(store, small(backend="reference", **TINY), "done")
    store.create_run("killed", small(backend="reference", **TINY), 1)  # killed: running, no rows
    kept = {p: (os.stat(p).st_mtime_ns, open(p, "rb").read()) for p in store.row_files("done")}
    kept_manifest = store.get("done/manifest.json")
    plan = [f"done {job}", f"killed {job}"]
    assert parity.run_plan(store.root, plan) == 1  # without --resume: both lines fail, as before
    out = capsys.readouterr().out
    assert all(f"== run {r} FAILED after" in out and f"DetrunError: run {r} already exists under" in out
               for r in ("done", "killed"))
    assert not store.row_files("killed") and store.manifest("killed")["status"] == "running"
    assert parity.run_plan(store.root, plan, resume=True) == 0
    out = capsys.readouterr().out
    assert "== run done: already complete, kept" in out
    assert "== run killed: incomplete (status running, 0 row files), removed; running it again" in out
    assert {p: (os.stat(p).st_mtime_ns, open(p, "rb").read()) for p in store.row_files("done")} == kept
    assert store.get("done/manifest.json") == kept_manifest
    assert store.manifest("killed")["status"] == "complete" and len(store.read_rows(["killed"])) == 11
    assert parity.run_plan(store.root, plan, resume=True) == 0  # then both are kept
    assert capsys.readouterr().out.count("already complete, kept") == 2


def test_parity_run_resume_redoes_a_finished_run_without_rows_and_a_folder_without_manifest(store, tmp_path, capsys):
    parity, job = _parity_script(), job_file(tmp_path, backend="reference", **TINY)
    store.create_run("empty", small(backend="reference", **TINY), 1)
    store.finish_run("empty", "complete")  # says complete, yet no rows
    os.makedirs(os.path.join(store.root, "bare"))  # killed between claiming the id and writing the manifest
    assert parity.run_plan(store.root, [f"empty {job}", f"bare {job}"], resume=True) == 0
    out = capsys.readouterr().out
    assert "== run empty: incomplete (status complete, 0 row files), removed" in out
    assert "== run bare: incomplete (unreadable), removed" in out
    assert all(len(store.read_rows([r])) == 11 for r in ("empty", "bare"))
