"""Fake FlashInfer wrappers for driving SGLang's real FlashInferAttnBackend on CPU (tests only).

Shaped like flashinfer 0.6.7.post3's wrappers where SGLang touches them (prefill.py / decode.py): the
constructor's buffers, plan (and begin_forward = plan), run(..., return_lse), the deprecated forward /
forward_return_lse that call run, is_cuda_graph_enabled, _paged_kv_indices_buf, use_tensor_cores. plan()
keeps what it was planned for (qo/kv indptr, kv indices); run() returns deterministic tensors of the
right shape (out like q, lse [rows, heads] float32) that depend on the wrapper kind and the input.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional

import torch

from detrun.kernels.backends.sglang_record import WrapperAPI


class _Fake:
    _backend = "fake"
    KIND = 0.0

    def __init__(self, float_workspace_buffer=None, kv_layout="NHD", use_cuda_graph=False, backend="auto",
                 use_tensor_cores=False, **buffers):
        self._use_cuda_graph = use_cuda_graph
        self.use_tensor_cores = use_tensor_cores
        self._paged_kv_indices_buf = buffers.get("paged_kv_indices_buf", buffers.get("paged_kv_indices_buffer"))
        self._custom_mask_buf = buffers.get("custom_mask_buf")
        self._plan_info: Optional[List[int]] = None
        self.plans: List[Dict[str, Any]] = []
        self.runs = 0

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    def plan(self, *args, **kwargs):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        self.plans.append({"indptr": [t.tolist() for t in tensors[:2]],
                           "fixed_split_size": kwargs.get("fixed_split_size"),
                           "disable_split_kv": kwargs.get("disable_split_kv")})
        self._plan_info = [len(self.plans)]

    begin_forward = plan

    def run(self, q, *args, return_lse: bool = False, **kwargs):
        self.runs += 1
        out = (q.float() * 0.5 + self.KIND).to(q.dtype)
        lse = q.float().sum(-1) + self.KIND
        return (out, lse) if return_lse else out

    run_return_lse = functools.partialmethod(run, return_lse=True)


class FakePaged(_Fake):
    KIND = 1.0

    def forward(self, q, paged_kv_cache, causal=False, **kwargs):
        return self.run(q, paged_kv_cache)

    def forward_return_lse(self, q, paged_kv_cache, causal=False, **kwargs):
        return self.run_return_lse(q, paged_kv_cache)


class FakeRagged(_Fake):
    KIND = 2.0

    def forward(self, q, k, v, causal=True, **kwargs):
        return self.run(q, k, v)

    def forward_return_lse(self, q, k, v, causal=True, **kwargs):
        return self.run_return_lse(q, k, v)


class FakeDecode(_Fake):
    KIND = 3.0

    def forward(self, q, paged_kv_cache, **kwargs):
        return self.run(q, paged_kv_cache)


def fake_fast_decode_plan(self, *args, global_override_indptr_cpu=None, **kwargs):
    return _Fake.plan(self, *args, **kwargs)


def fake_merge_state(v_a, s_a, v_b, s_b):
    return (v_a.float() + v_b.float()).to(v_a.dtype), torch.logaddexp(s_a, s_b)


def fake_api() -> WrapperAPI:
    return WrapperAPI(paged=FakePaged, ragged=FakeRagged, decode=FakeDecode,
                      fast_decode_plan=fake_fast_decode_plan, merge_state=fake_merge_state)
