import math

import pytest
import torch

from detrun.kernels.backends.base import PATH_PAGED, PATH_RAGGED, PATH_RAGGED_PREFIX, Unsupported, choose_path
from detrun.kernels.backends.reference import ReferenceBackend, gather
from detrun.kernels.digest import tensor_digest
from detrun.judge.diffstats import diff_stats
from detrun.kernels.inputs import build_batch
from detrun.spec.model import spec_from_dict
from tests.helpers import small


def backend(monkeypatch, paged: bool, **overrides):
    monkeypatch.setenv("SGLANG_FLASHINFER_USE_PAGED", "1" if paged else "0")
    spec = spec_from_dict(small(**overrides))
    return spec, ReferenceBackend(spec, torch.device("cpu"))


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


def test_sglang_rule():
    batch = build_batch(spec_from_dict(small()), "prefix_alone")
    assert choose_path(True, False, "eager", batch) == PATH_PAGED
    assert choose_path(False, False, "eager", batch) == PATH_RAGGED_PREFIX
    assert choose_path(False, True, "eager", batch) == PATH_PAGED  # deterministic forces paged
    assert choose_path(False, True, "cudagraph", batch) == PATH_RAGGED_PREFIX  # capture: not use_paged
    assert choose_path(True, False, "cudagraph", batch) == PATH_PAGED


def test_flag_read_once_in_init(monkeypatch):
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


def test_inputs_same_request_same_bits_and_shared_pages():
    spec = spec_from_dict(small())
    a, b = build_batch(spec, "alone"), build_batch(spec, "mixed")
    i = b.requests.index("target")
    assert torch.equal(a.q, b.q[b.span(i)])
    assert torch.equal(gather(a.k_cache, a.full, 0, 21), gather(b.k_cache, b.full, i, 21))
    shared = build_batch(spec, "prefix_shared")
    pages = lambda j: shared.prefix.indices[shared.prefix.indptr[j]:shared.prefix.indptr[j + 1]].tolist()  # noqa
    assert pages(0) == pages(1) and len(pages(0)) == 16 // spec.page_size
    assert torch.equal(gather(shared.k_cache, shared.full, 0, 26)[16:], shared.k[shared.span(0)])


def test_digest_sees_one_bit_dtype_and_shape():
    t = torch.randn(64, 8, dtype=torch.float32).to(torch.bfloat16)
    d = tensor_digest(t)
    assert d == tensor_digest(t.clone())
    flipped = t.clone()
    flipped.view(torch.int16)[3, 5] ^= 1
    assert tensor_digest(flipped) != d
    assert tensor_digest(t.reshape(8, 64)) != d
    assert tensor_digest(t.view(torch.float16)) != d


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_diff_stats_one_ulp(dtype):
    t = torch.randn(4, 6).to(dtype)
    bits = {2: torch.int16, 4: torch.int32}[t.element_size()]
    other = t.clone()
    other.view(bits)[2, 3] += 1
    raw = lambda x: x.view(bits).numpy().tobytes()  # noqa: E731
    name = str(dtype).removeprefix("torch.")
    stats = diff_stats(raw(t), raw(other), name, (4, 6))
    assert (stats.count, stats.max_ulp, stats.first_index) == (1, 1, (2, 3))
    assert stats.max_abs == pytest.approx(abs(float(other[2, 3]) - float(t[2, 3])))
    assert diff_stats(raw(t), raw(t), name, (4, 6)).count == 0


def test_inputs_are_pinned_and_stale_slots_seeded():
    """Request values are the CPU draws detrun has always made (baselines depend on them); every slot
    outside the batch's pages holds seeded garbage, the same in every build of the case."""
    spec = spec_from_dict(small())
    a, again = build_batch(spec, "alone"), build_batch(spec, "alone")
    assert tensor_digest(a.q) == "5c634c6afbaf226a1fec91ffd644b964"
    assert tensor_digest(a.k) == "4fd763fa336fa6c565925db6c4352068"
    assert torch.equal(a.k_cache, again.k_cache) and torch.equal(a.v_cache, again.v_cache)
    used = set(a.full.indices.tolist())
    unused = [p for p in range(a.k_cache.shape[0]) if p not in used]
    assert unused and a.k_cache[unused].abs().max() <= 4 and a.k_cache[unused].float().std() > 1
    assert not torch.equal(a.k_cache[unused], a.v_cache[unused])
    other = build_batch(spec, "mixed")
    assert not torch.equal(other.k_cache[: len(unused)], a.k_cache[: len(unused)])


def test_draws_shared_by_cases_give_the_same_batches():
    from detrun.kernels.inputs import Draws

    spec = spec_from_dict(small())
    draws = Draws(spec, "cpu")
    for case in ("alone", "mixed", "prefix_shared"):
        shared, fresh = build_batch(spec, case, "cpu", draws), build_batch(spec, case)
        for name in ("q", "k", "v", "k_cache", "v_cache"):
            assert torch.equal(getattr(shared, name), getattr(fresh, name)), (case, name)
    assert len(draws.cache) == 17  # one draw per (kind, name): target once for alone and mixed
