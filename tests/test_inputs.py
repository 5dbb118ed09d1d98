"""Batch inputs (kernels/inputs.py): a request has the same bits in every case it is in, shared prefixes share
pages, the draws are pinned (baselines depend on them), stale cache slots are seeded garbage, and draws
shared by cases give the same batches as fresh ones."""

import torch

from detrun.kernels.backends.reference import gather
from detrun.kernels.digest import tensor_digest
from detrun.kernels.inputs import build_batch
from detrun.spec.model import spec_from_dict
from tests.helpers import small


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
