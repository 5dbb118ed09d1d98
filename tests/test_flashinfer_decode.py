"""FlashInfer decode (FlashInferBackend.forward_decode) on the CPU against a stand-in flashinfer whose decode
wrapper keeps flashinfer 0.6.7.post3's signatures and checks: eager plans with the eager split knobs, CUDA
graphs padded to a capture batch size, captured once (SGLang's capture batch) and re-planned with
fast_decode_plan for each later batch, the decode plan fields, the known-bug gate and the tensor-core rule."""

import os
import sys
import types

import pytest
import torch

from detrun.envflags import TaskFlags
from detrun.judge.audit import audit_kernels
from detrun.kernels.backends import base
from detrun.kernels.backends.base import KnownBug, Unsupported
from detrun.kernels.backends.flashinfer import decode_plan_of
from detrun.kernels.backends.plan_layouts import DECODE_PLAN_FIELDS, FA2_PLAN_FIELDS, PLAN_UNKNOWN
from detrun.kernels.inputs import build_batch
from detrun.spec.model import spec_from_dict
from tests.helpers import FakeGraph, FakePaged, FakeRagged, small

CHUNK_AT = 8  # where the fake plans write kv_chunk_size in the pinned int workspace


class Decode:
    """BatchDecodeWithPagedKVCacheWrapper(float_workspace_buffer, kv_layout, use_cuda_graph, use_tensor_cores,
    paged_kv_indptr_buffer, paged_kv_indices_buffer, paged_kv_last_page_len_buffer, backend, jit_args)."""

    made = []

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):
        self._use_cuda_graph, self._use_tensor_cores, self._backend = use_cuda_graph, use_tensor_cores, backend
        self._paged_kv_indptr_buf = paged_kv_indptr_buffer
        self._paged_kv_indices_buf = paged_kv_indices_buffer
        self._paged_kv_last_page_len_buf = paged_kv_last_page_len_buffer
        self._fixed_batch_size = len(paged_kv_last_page_len_buffer) if use_cuda_graph else 0
        self._pin_memory_int_workspace_buffer = torch.zeros(64, dtype=torch.uint8)
        self._plan_info = []
        self.calls = []  # (plan | fast, split kwargs, host indptr, indices, last_page_len)
        Decode.made.append(self)

    @property
    def use_tensor_cores(self):
        return self._use_tensor_cores

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
             kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
             non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None, disable_split_kv=False):
        if fixed_split_size is not None and not self.use_tensor_cores:
            raise ValueError("fixed_split_size is only supported by tensor core decode for now.")
        if self.is_cuda_graph_enabled:
            self._paged_kv_indptr_buf.copy_(indptr)
            self._paged_kv_last_page_len_buf.copy_(last_page_len)
            self._paged_kv_indices_buf[: len(indices)].copy_(indices)
        else:
            self._paged_kv_indptr_buf, self._paged_kv_indices_buf = indptr.clone(), indices.clone()
            self._paged_kv_last_page_len_buf = last_page_len.clone()
        self._plan("plan", indptr.cpu(), indices, last_page_len, page_size, fixed_split_size, disable_split_kv)

    def _plan(self, how, indptr_host, indices, last_page_len, page_size, fixed, off):
        bs = len(last_page_len)
        if self.is_cuda_graph_enabled and bs != self._fixed_batch_size:
            raise ValueError("The batch size should be fixed in cudagraph mode")
        pages = (indptr_host[1:] - indptr_host[:-1]).tolist()
        chunk = bs if off else (fixed or max(pages))  # a plan that follows the batch, as the real planner does
        split = int(not off and any(p > chunk for p in pages))
        fields = FA2_PLAN_FIELDS if self.use_tensor_cores else DECODE_PLAN_FIELDS
        info = dict.fromkeys(fields, 0)
        info.update(padded_batch_size=bs, enable_cuda_graph=int(self.is_cuda_graph_enabled), split_kv=split,
                    kv_chunk_size_ptr_offset=CHUNK_AT)
        if self.use_tensor_cores:
            info.update(total_num_rows=bs, cta_tile_q=16)
        self._plan_info = list(info.values())
        self._pin_memory_int_workspace_buffer[CHUNK_AT:CHUNK_AT + 4] = torch.tensor(
            [chunk * page_size], dtype=torch.int32).view(torch.uint8)
        self.calls.append((how, dict(fixed_split_size=fixed, disable_split_kv=off), indptr_host.tolist(),
                           indices[: int(indptr_host[-1])].tolist(), last_page_len.tolist()))

    def run(self, q, paged_kv_cache, *args, out=None, lse=None, return_lse=False, **kwargs):
        # Reads the page table the wrapper holds now (a replay reads the fixed buffers as they are).
        assert q.shape[0] == len(self._paged_kv_last_page_len_buf) and return_lse
        pages = (self._paged_kv_indptr_buf[1:] - self._paged_kv_indptr_buf[:-1]).to(torch.float32)
        out.copy_((q.float() * pages[:, None, None]).to(out.dtype))
        lse.copy_(pages[:, None].expand_as(lse))
        return out, lse


def fast_decode_plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                     pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type=None,
                     kv_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
                     non_blocking=True, fixed_split_size=None, disable_split_kv=False, global_override_indptr_cpu=None):
    assert self.is_cuda_graph_enabled and indptr is self._paged_kv_indptr_buf  # SGLang wrote the buffers itself
    self._plan("fast", global_override_indptr_cpu, indices, last_page_len, page_size, fixed_split_size,
               disable_split_kv)


FIVE = {"crowd5": ["target", "decode", "short"], "crowd6": ["short", "target", "long", "decode"]}


@pytest.fixture
def backend(monkeypatch):
    fake = types.SimpleNamespace(
        __version__="0.6.7.post3", BatchPrefillWithPagedKVCacheWrapper=FakePaged,
        BatchPrefillWithRaggedKVCacheWrapper=FakeRagged, BatchDecodeWithPagedKVCacheWrapper=Decode,
        fast_decode_plan=fast_decode_plan)
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    monkeypatch.setattr(base, "capture", FakeGraph)
    monkeypatch.delenv("SGLANG_FLASHINFER_USE_TENSOR_CORE", raising=False)
    FakeGraph.captures, Decode.made = 0, []

    def make(version="0.6.7.post3", heads=None, dtype="bf16", env=None, **decode):
        fake.__version__ = version
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        from detrun.kernels.backends.flashinfer import FlashInferBackend

        data = small(env=env or {}, cases={**small()["cases"], **FIVE}, dtype=dtype,
                     flashinfer={"workspace_mb": 16, "profile_kernels": False, "decode": decode})
        if heads:
            data["heads"] = heads
        spec = spec_from_dict(data)
        return spec, FlashInferBackend(spec, torch.device("cpu"), flags=TaskFlags.parse(os.environ))

    return make


def _graph(made):
    return [w for w in made if w.is_cuda_graph_enabled]


def test_eager_decode_plans_one_wrapper_per_batch_with_the_eager_split_knobs(backend):
    spec, be = backend(tensor_cores=True, fixed_split_size=8, graph_fixed_split_size=2)
    batch = build_batch(spec, "mixed")
    out = be.forward_decode(batch, "eager")
    be.forward_decode(build_batch(spec, "alone"), "eager")
    (w,) = Decode.made
    assert [c[0] for c in w.calls] == ["plan", "plan"] and w.use_tensor_cores and w._backend == "fa2"
    assert w.calls[0][1] == {"fixed_split_size": 8, "disable_split_kv": False}
    assert w.calls[0][2] == batch.full.indptr.tolist()  # the request's whole cache: prefix and every new token
    assert out.path == "decode" and out.attn == "fa2" and out.out.shape == (3, 4, 32) and out.lse.shape == (3, 4)
    last = batch.qo_indptr[1:] - 1  # q is each request's last prefill row
    pages = (batch.full.indptr[1:] - batch.full.indptr[:-1]).float()
    assert torch.equal(out.out, (batch.q[last].float() * pages[:, None, None]).to(out.out.dtype))
    assert out.plan == {"backend": "fa2", "tensor_cores": True, "padded_batch_size": 3, "total_num_rows": 3,
                        "cta_tile_q": 16, "enable_cuda_graph": 0, "split_kv": 1, "kv_chunk_size": 8 * 4}


def test_graph_decode_pads_to_the_capture_size_and_replays_one_capture_with_replans(backend):
    spec, be = backend(capture_batch_sizes=[8, 1, 2, 4])
    eager = be.forward_decode(build_batch(spec, "crowd5"), "eager")
    five, six = build_batch(spec, "crowd5"), build_batch(spec, "crowd6")
    first = be.forward_decode(five, "cudagraph")
    second = be.forward_decode(six, "cudagraph")
    again = be.forward_decode(five, "cudagraph", repeat=1)
    (w,) = _graph(Decode.made)
    assert FakeGraph.captures == 1 and w._fixed_batch_size == 8 and not w.use_tensor_cores  # GQA 2: CUDA cores
    assert [c[0] for c in w.calls] == ["plan", "fast", "fast", "fast"]
    # the capture plan is SGLang's capture batch: every entry one token in page 0
    assert w.calls[0][2:] == ([0, 1, 2, 3, 4, 5, 6, 7, 8], [0] * 8, [1] * 8)
    # a batch of 5 padded to 8: three entries of seq len 1 (SGLang's fill value) in page 0
    real = five.full.indptr.tolist()
    assert w.calls[1][2] == real + [real[-1] + 1, real[-1] + 2, real[-1] + 3]
    assert w.calls[1][3] == five.full.indices.tolist() + [0, 0, 0]
    assert w.calls[1][4] == five.full.last_page_len.tolist() + [1, 1, 1]
    assert first.out.shape == (5, 4, 32) and second.out.shape == (6, 4, 32)
    assert torch.equal(first.out, eager.out) and torch.equal(first.lse, eager.lse)  # only the first bs rows
    assert torch.equal(again.out, first.out)
    assert first.plan["graph_bs"] == 8 and first.plan["enable_cuda_graph"] == 1
    assert first.plan["capture.kv_chunk_size"] == 4 and first.plan["kv_chunk_size"] != 4  # capture-time plan kept
    assert torch.equal(be._decode_kv.k[: five.k_cache.shape[0]], five.k_cache)  # the graphs' KV pool: the last case


def test_graph_decode_above_the_largest_capture_size_runs_eager(backend):
    spec, be = backend(capture_batch_sizes=[1, 2, 4], fixed_split_size=None)
    out = be.forward_decode(build_batch(spec, "crowd5"), "cudagraph")
    assert FakeGraph.captures == 0 and not _graph(Decode.made) and out.plan["graph_bs"] is None
    assert out.plan["enable_cuda_graph"] == 0 and out.out.shape == (5, 4, 32)
    be.forward_decode(build_batch(spec, "mixed"), "cudagraph")
    assert FakeGraph.captures == 1 and _graph(Decode.made)[0]._fixed_batch_size == 4


def test_graph_decode_uses_the_graph_split_knobs(backend):
    spec, be = backend("0.7.2", tensor_cores=True, fixed_split_size=64, graph_disable_split_kv=True)
    out = be.forward_decode(build_batch(spec, "mixed"), "cudagraph")
    (w,) = _graph(Decode.made)
    assert {(c[1]["fixed_split_size"], c[1]["disable_split_kv"]) for c in w.calls} == {(None, True)}
    assert out.plan["split_kv"] == 0 and out.plan["graph_bs"] == 4


def test_decode_plan_fields_from_a_decode_plan_info_vector():
    w = types.SimpleNamespace(use_tensor_cores=False, _backend="fa2",
                              _pin_memory_int_workspace_buffer=torch.zeros(64, dtype=torch.uint8))
    w._plan_info = [132, 0, 4096, 0, 528, 1056, 2112, 40, 1, 1]  # DecodePlanInfo::ToVector order
    w._pin_memory_int_workspace_buffer[40:44] = torch.tensor([48], dtype=torch.int32).view(torch.uint8)
    assert decode_plan_of(w, "0.6.7.post3") == {"backend": "fa2", "tensor_cores": False, "padded_batch_size": 132,
                                 "enable_cuda_graph": 1, "split_kv": 1, "kv_chunk_size": 48}
    w._plan_info = [1, 2, 3]  # a layout it does not know: no fields are made up, and it says so
    plan = decode_plan_of(w, "0.6.7.post3")
    assert set(plan) == {"backend", "tensor_cores", PLAN_UNKNOWN} and "3 values" in plan[PLAN_UNKNOWN]


@pytest.mark.parametrize("version, gated", [("0.6.7.post3", True), ("0.7.2", False)])
def test_tensor_core_graph_decode_without_split_is_a_known_bug_before_0_7_2(backend, version, gated):
    spec, be = backend(version, tensor_cores=True, graph_disable_split_kv=True)
    batch = build_batch(spec, "mixed")
    be.forward_decode(batch, "eager")  # eager decode is not gated
    if gated:
        with pytest.raises(KnownBug, match=r"#4002.*PR #5176.*SGLang PRs #31349/#31387"):
            be.forward_decode(batch, "cudagraph")
        assert FakeGraph.captures == 0
        be.force_known_bugs = True  # an isolated worker runs it anyway
    assert be.forward_decode(batch, "cudagraph").plan["graph_bs"] == 4


def test_cuda_core_decode_refuses_split_knobs_it_would_ignore(backend):
    spec, be = backend(fixed_split_size=64)
    with pytest.raises(Unsupported, match="flashinfer.decode.fixed_split_size needs tensor-core decode"):
        be.forward_decode(build_batch(spec, "alone"), "eager")
    spec, be = backend(graph_disable_split_kv=True)
    with pytest.raises(Unsupported, match="graph_disable_split_kv needs tensor-core decode"):
        be.forward_decode(build_batch(spec, "alone"), "cudagraph")


@pytest.mark.parametrize("heads, dtype, env, choice, expected", [
    ({"qo": 8, "kv": 2}, "bf16", None, None, True),  # GQA group 4
    ({"qo": 4, "kv": 2}, "fp16", None, None, False),  # GQA group 2
    ({"qo": 8, "kv": 2}, "fp32", None, None, False),  # fp32 KV: never
    ({"qo": 4, "kv": 2}, "bf16", "TRUE", None, True),  # SGLANG_FLASHINFER_USE_TENSOR_CORE wins
    ({"qo": 8, "kv": 2}, "bf16", "false", None, False),
    ({"qo": 8, "kv": 2}, "bf16", "true", False, False),  # the spec's knob wins over all
])
def test_decode_uses_tensor_cores_by_sglangs_rule(backend, heads, dtype, env, choice, expected):
    spec, be = backend(heads=heads, dtype=dtype, env={"SGLANG_FLASHINFER_USE_TENSOR_CORE": env} if env else None,
                       tensor_cores=choice)
    out = be.forward_decode(build_batch(spec, "alone"), "eager")
    assert be.decode_tensor_cores is expected and Decode.made[0].use_tensor_cores is expected
    assert out.plan["tensor_cores"] is expected and out.attn == ("fa2" if expected else "cuda-core")
    assert ("cta_tile_q" in out.plan) is expected  # tensor cores hold an FA2 prefill plan


def test_decode_rows_pass_the_audit_with_either_decode_kernel_and_fail_with_none_both_or_a_ragged_one():
    prefill = "flashinfer::BatchPrefillWithPagedKVCacheKernel<...>"
    decode = "flashinfer::BatchDecodeWithPagedKVCacheKernel<...>"
    merge = "flashinfer::VariableLengthMergeStatesKernel<...>"
    assert audit_kernels("decode", [decode, merge]) is None
    assert audit_kernels("decode", [prefill, merge]) is None  # tensor cores run the prefill kernel
    assert audit_kernels("decode", []) is None  # no kernels recorded: not audited
    assert "no paged kernel ran" in audit_kernels("decode", [merge])
    assert "both the CUDA-core and the tensor-core kernel" in audit_kernels("decode", [decode, prefill])
    assert "ragged kernel ran" in audit_kernels("decode", ["flashinfer::BatchPrefillWithRaggedKVCacheKernel", decode])
