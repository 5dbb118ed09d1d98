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


def test_draws_on_threads_give_the_same_bits_and_draw_keys_lists_what_build_batch_draws(monkeypatch):
    """A case's value sets drawn side by side on CPU threads equal the serial draws (one generator per set),
    and draw_keys names exactly the sets build_batch asks for, in its order."""
    import threading

    from detrun.kernels import inputs
    from detrun.kernels.inputs import Draws, draw_keys

    spec = spec_from_dict(small())
    serial, calls = Draws(spec, "cpu"), []
    real = Draws.__call__

    def logged(self, kind, name, n, heads):
        calls.append((kind, name, n, heads))
        return real(self, kind, name, n, heads)

    monkeypatch.setattr(Draws, "__call__", logged)
    for case in spec.cases:
        calls.clear()
        build_batch(spec, case, "cpu", serial)
        assert calls == draw_keys(spec, case), case
    monkeypatch.setattr(Draws, "__call__", real)

    drawn_on, real_randn = [], inputs._randn
    monkeypatch.setattr(inputs, "_randn", lambda *a: drawn_on.append(threading.current_thread().name) or real_randn(*a))
    threaded = Draws(spec, "cpu", threads=4)
    for case in spec.cases:
        a, b = build_batch(spec, case, "cpu", threaded), build_batch(spec, case, "cpu", serial)
        for name in ("q", "k", "v", "k_cache", "v_cache"):
            assert torch.equal(getattr(a, name), getattr(b, name)), (case, name)
    assert drawn_on and all(t.startswith("detrun-draws") for t in drawn_on)  # every set on the threads
    assert len(drawn_on) == len(threaded.cache) == len(serial.cache)  # each set drawn once
    threaded.close()
    assert threaded.pool is None


def test_a_task_draws_the_next_cases_values_while_this_case_runs(monkeypatch):
    """The worker starts the next DRAW_AHEAD cases' draws right after building a case's batch."""
    from detrun.kernels import inputs
    from detrun.run.worker import run_shard
    from detrun.spec.matrix import Shard

    events, ahead = [], 2  # the job has 5 cases: 2 ahead shows the window moving and ending
    monkeypatch.setattr("detrun.run.worker.DRAW_AHEAD", ahead)
    real_prefetch, real_build = inputs.Draws.prefetch, inputs.build_batch

    def prefetch(self, keys):
        keys = list(keys)
        events.append(("prefetch", keys[-1][1] if keys else None))
        return real_prefetch(self, keys)

    monkeypatch.setattr(inputs.Draws, "prefetch", prefetch)
    monkeypatch.setattr("detrun.run.worker.build_batch", lambda spec, case, *a: events.append(("build", case))
                        or real_build(spec, case, *a))
    data = small(modes=["eager"], repeats=1)
    run_shard(data, Shard(0, (0,)), "ahead")
    spec = spec_from_dict(data)
    cases = list(spec.cases)
    builds = [i for i, e in enumerate(events) if e[0] == "build"]
    assert len(cases) > ahead + 1
    for i, at in enumerate(builds[:-1]):
        started = events[at:builds[i + 1]]
        # after this case's build (which starts its own sets first), before the next one's: the next `ahead`
        # cases' sets are started, no more
        expected = [("prefetch", spec.members(c)[-1]) for c in cases[i + 1:i + 1 + ahead]]
        assert [e for e in started if e[0] == "prefetch"][1:] == expected, (cases[i], events)


def test_token_pages_hold_the_same_keys_and_values_in_pages_of_one_token():
    """Batch.token_pages (SGLang's view: plans of page size 1 over token slots) reads each request's prefix and
    whole cache as the paged batch does; a slot off by one (a tampered index) reads other values."""
    spec = spec_from_dict(small(page_size=4))
    batch = build_batch(spec, "prefix_shared")
    tokens = batch.token_pages()
    assert tokens.page_size == 1 and tokens.token_pages() is tokens and batch.token_pages() is tokens
    assert tokens.full.last_page_len.tolist() == [1] * len(batch.requests)
    assert torch.equal(tokens.full.indptr[1:], torch.tensor(batch.kv_lens).cumsum(0).int())
    for table, t_table, lens in ((batch.full, tokens.full, batch.kv_lens), (batch.prefix, tokens.prefix,
                                                                            batch.prefix_lens)):
        for i, n in enumerate(lens):
            for cache, t_cache in ((batch.k_cache, tokens.k_cache), (batch.v_cache, tokens.v_cache)):
                assert torch.equal(gather(cache, table, i, n), gather(t_cache, t_table, i, n))
    t_table = tokens.full
    t_table.indices[0] += 1
    assert not torch.equal(gather(batch.k_cache, batch.full, 0, batch.kv_lens[0]),
                           gather(tokens.k_cache, t_table, 0, batch.kv_lens[0]))
