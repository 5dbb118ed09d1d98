"""The reference backend on the CPU: SGLang's path rule, paged and ragged paths bitwise equal without a prefix
and close to float64 attention, exact batch invariance, split_kv's batch-dependent plan, the canary, and
CUDA graphs refused without CUDA."""

import math
import os

import pytest
import torch

from detrun.envflags import TaskFlags
from detrun.kernels.backends.base import PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX, Unsupported, choose_path
from detrun.kernels.backends.reference import ReferenceBackend, gather
from detrun.kernels.digest import tensor_digest
from detrun.kernels.inputs import build_batch
from detrun.spec.model import spec_from_dict
from tests.helpers import small


def backend(monkeypatch, paged: bool, **overrides):
    monkeypatch.setenv("SGLANG_FLASHINFER_USE_PAGED", "1" if paged else "0")
    spec = spec_from_dict(small(**overrides))
    return spec, ReferenceBackend(spec, torch.device("cpu"), flags=TaskFlags.parse(os.environ))


def float64_attention(batch, i, group, causal=True):
    """Naive attention in float64 from the gathered full KV: the ground truth."""
    span = batch.span(i)
    q = batch.q[span].double()
    kv_len = batch.kv_lens[i]
    k = gather(batch.k_cache, batch.full, i, kv_len).double().repeat_interleave(group, 1)
    v = gather(batch.v_cache, batch.full, i, kv_len).double().repeat_interleave(group, 1)
    s = torch.einsum("nhd,thd->nht", q, k) / math.sqrt(q.shape[-1])
    qpos = torch.arange(batch.prefix_lens[i], kv_len)
    s = s.masked_fill((torch.arange(kv_len)[None, :] > qpos[:, None])[:, None, :], -math.inf)
    return torch.einsum("nht,thd->nhd", torch.softmax(s, -1), v), torch.logsumexp(s, -1) / math.log(2)


def test_the_path_follows_sglangs_rule_for_the_flag_deterministic_and_capture():
    batch = build_batch(spec_from_dict(small()), "prefix_alone")
    assert choose_path(True, False, "eager", batch) == PATH_PAGED
    assert choose_path(False, False, "eager", batch) == PATH_RAGGED_PREFIX
    assert choose_path(False, True, "eager", batch) == PATH_PAGED  # deterministic forces paged
    assert choose_path(False, True, "cudagraph", batch) == PATH_RAGGED_PREFIX  # capture: not use_paged
    assert choose_path(True, False, "cudagraph", batch) == PATH_PAGED


def test_the_paged_flag_is_read_once_when_the_backend_is_built(monkeypatch):
    _, be = backend(monkeypatch, paged=True)
    monkeypatch.setenv("SGLANG_FLASHINFER_USE_PAGED", "0")
    assert be.use_paged is True


def test_paged_and_ragged_match_bitwise_without_prefix_and_are_close_to_fp64(monkeypatch):
    spec, paged = backend(monkeypatch, paged=True)
    _, ragged = backend(monkeypatch, paged=False)
    batch = build_batch(spec, "mixed")
    a, b = paged.forward(batch, "eager"), ragged.forward(batch, "eager")
    assert (a.path, b.path) == (PATH_PAGED, PATH_RAGGED)
    assert torch.equal(a.out, b.out) and torch.equal(a.lse, b.lse)
    for i in range(len(batch.requests)):
        ref_out, ref_lse = float64_attention(batch, i, 2)
        span = batch.span(i)
        assert torch.allclose(a.out[span].double(), ref_out, atol=1e-2, rtol=1e-2)
        assert torch.allclose(a.lse[span].double(), ref_lse, atol=1e-4)


def test_prefix_paths_agree_with_fp64(monkeypatch):
    spec, paged = backend(monkeypatch, paged=True)
    _, ragged = backend(monkeypatch, paged=False)
    batch = build_batch(spec, "prefix_shared")
    a, b = paged.forward(batch, "eager"), ragged.forward(batch, "eager")
    assert b.path == PATH_RAGGED_PREFIX
    for out in (a, b):
        for i in range(len(batch.requests)):
            ref_out, ref_lse = float64_attention(batch, i, 2)
            assert torch.allclose(out.out[batch.span(i)].double(), ref_out, atol=1e-2, rtol=1e-2)
            assert torch.allclose(out.lse[batch.span(i)].double(), ref_lse, atol=1e-4)


def _target(spec, be, case):
    batch = build_batch(spec, case)
    i = batch.requests.index("target")
    out = be.forward(batch, "eager")
    return out.out[batch.span(i)], out.plan


def test_exact_is_batch_invariant(monkeypatch):
    spec, be = backend(monkeypatch, paged=True)
    alone, _ = _target(spec, be, "alone")
    for case in ("mixed", "mixed_decode"):
        assert tensor_digest(_target(spec, be, case)[0]) == tensor_digest(alone)


def test_split_kv_depends_on_batch(monkeypatch):
    spec, be = backend(monkeypatch, paged=True, reference={"variant": "split_kv", "kv_tile": 4, "num_sms": 4})
    (alone, plan_a), (mixed, plan_b) = _target(spec, be, "alone"), _target(spec, be, "mixed_decode")
    assert plan_a["kv_chunk_size"] != plan_b["kv_chunk_size"]
    assert not torch.equal(alone, mixed)
    assert torch.allclose(alone.float(), mixed.float(), atol=2e-2)


def test_canary_differs_between_calls(monkeypatch):
    spec, be = backend(monkeypatch, paged=True, reference={"variant": "canary"})
    batch = build_batch(spec, "mixed")
    digests = {tensor_digest(be.forward(batch, "eager").lse) for _ in range(3)}
    assert len(digests) > 1


def test_cudagraph_on_cpu_is_unsupported(monkeypatch):
    spec, be = backend(monkeypatch, paged=True)
    with pytest.raises(Unsupported, match="needs a CUDA device"):
        be.forward(build_batch(spec, "alone"), "cudagraph")
