"""Batch inputs (kernels/inputs.py): a request has the same bits in every case it is in, shared prefixes share
pages, the draws are pinned (baselines depend on them), stale cache slots are seeded garbage, and draws
shared by cases give the same batches as fresh ones."""

import pytest
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


def _splitmix64_sums(seed: int, count: int):
    """counter_values re-derived with numpy's unsigned arithmetic: splitmix64 of seed + i * golden, three
    16-bit fields summed, centred, scaled by 2**-16."""
    import numpy as np

    u = np.uint64
    with np.errstate(over="ignore"):
        x = np.arange(count, dtype=u) * u(0x9E3779B97F4A7C15) + u(seed)
        x = x ^ (x >> u(30))
        x = x * u(0xBF58476D1CE4E5B9)
        x = x ^ (x >> u(27))
        x = x * u(0x94D049BB133111EB)
        x = x ^ (x >> u(31))
    total = (x & u(0xFFFF)) + ((x >> u(16)) & u(0xFFFF)) + ((x >> u(32)) & u(0xFFFF))
    return (2 * total.astype(np.int64) - 3 * 0xFFFF).astype(np.float32) * np.float32(2.0**-16)


def test_counter_values_are_splitmix64_sums_of_mean_0_and_std_1():
    """counter_values is the documented hash (an independent numpy derivation gives the same bits) and looks like
    the normal draws it stands in for: mean ~0, standard deviation ~1, within +-3."""
    import numpy as np

    from detrun.kernels.inputs import counter_values

    seed = 0x7FFF_FFFF_FFFF_FF11  # a large stable_seed: the wrapping arithmetic matters
    values = counter_values(seed, (64, 4, 32), "cpu")
    assert values.dtype == torch.float32 and values.shape == (64, 4, 32)
    assert np.array_equal(values.flatten().numpy(), _splitmix64_sums(seed, values.numel()))
    many = counter_values(3, (1 << 20,), "cpu")
    assert abs(many.mean().item()) < 0.01 and abs(many.std().item() - 1) < 0.01 and many.abs().max() <= 3
    assert not torch.equal(counter_values(4, (1 << 20,), "cpu"), many)


def test_counter_draws_keep_a_requests_bits_across_cases_and_use_no_cpu_threads():
    """draws: counter: a request has the same bits in every case (the property the batch axis needs), values
    other than the CPU draws, and the draws start no threads (they are made where the task runs)."""
    from detrun.kernels.inputs import Draws, counter_values, stable_seed

    cpu, counter = spec_from_dict(small()), spec_from_dict(small(draws="counter"))
    a, b = build_batch(counter, "alone"), build_batch(counter, "mixed")
    i = b.requests.index("target")
    assert torch.equal(a.q, b.q[b.span(i)])
    assert torch.equal(gather(a.k_cache, a.full, 0, 21), gather(b.k_cache, b.full, i, 21))
    q = counter_values(stable_seed(counter.seed, "q", "target"), (a.qo_lens[0], 4, counter.head_dim), "cpu")
    assert counter.heads.qo == 4 and torch.equal(a.q, q.to(torch.bfloat16))
    assert not torch.equal(a.q, build_batch(cpu, "alone").q)
    draws = Draws(counter, "cpu", threads=4)
    assert draws.pool is None
    draws.prefetch([("q", "target", 5, 4)])
    assert not draws.ahead


def test_compare_refuses_runs_that_drew_different_inputs(store, capsys):
    """Runs of draws: cpu and draws: counter (or of two seeds) are not compared bit for bit: a one-line error
    naming the field and each run's value, exit 2; two counter runs compare as any two runs do."""
    from tests.helpers import cli_error, cli_main, run_inline

    run_inline(store, small(draws="counter"), "c1")
    run_inline(store, small(draws="counter"), "c2")
    run_inline(store, small(), "p1")
    run_inline(store, small(seed=1), "s1")
    root = ["--runs-root", store.root]
    assert cli_main(capsys, "compare", "c1", "c2", *root)[0] == 0
    code, line = cli_error(capsys, "compare", "c1", "p1", *root)
    assert code == 2 and "draws: c1 counter, p1 cpu" in line and "seed" not in line
    code, line = cli_error(capsys, "compare", "p1", "s1", *root)
    assert code == 2 and "seed: p1 7, s1 1" in line


@pytest.mark.parametrize("budget, first", [(0, 2), (1 << 40, None)])
def test_a_task_starts_the_first_cases_values_before_it_opens_its_profile_session(monkeypatch, budget, first):
    """Before the first cell the worker starts drawing the first cases (at least DRAW_AHEAD, then up to
    DRAW_FIRST_BYTES of values), then opens the profile window: the threads draw while CUPTI sets up."""
    from detrun.kernels import inputs
    from detrun.run import worker
    from detrun.spec.matrix import Shard

    events = []
    monkeypatch.setattr(worker, "DRAW_AHEAD", 2)
    monkeypatch.setattr(worker, "DRAW_FIRST_BYTES", budget)
    real_prefetch, real_window = inputs.Draws.prefetch, worker.ShardRunner._profile_window

    def prefetch(self, keys):
        keys = list(keys)
        events.append(("prefetch", keys[-1][1]))
        return real_prefetch(self, keys)

    monkeypatch.setattr(inputs.Draws, "prefetch", prefetch)
    monkeypatch.setattr(worker.ShardRunner, "_profile_window",
                        lambda self, repeat: events.append(("window", repeat)) or real_window(self, repeat))
    monkeypatch.setattr(worker, "build_batch", lambda spec, case, *a: events.append(("build", case))
                        or inputs.build_batch(spec, case, *a))
    data = small(modes=["eager"], repeats=1)
    worker.run_shard(data, Shard(0, (0,)), "first")
    spec = spec_from_dict(data)
    cases = list(spec.cases)
    before = events[:events.index(("window", 0))]
    assert before == [("prefetch", spec.members(c)[-1]) for c in cases[:first]]
    assert events.index(("window", 0)) < events.index(("build", cases[0]))


def test_a_tasks_draws_time_their_wait_and_their_move_as_stages_of_inputs():
    from detrun.kernels.inputs import Draws, draw_keys
    from detrun.stages import DRAW_MOVE, DRAW_WAIT, NESTED, Stages

    spec, stages = spec_from_dict(small()), Stages()
    draws = Draws(spec, "cpu", threads=2, stages=stages)
    keys = [key for case in spec.cases for key in draw_keys(spec, case)]
    for key in keys:
        draws(*key)
    draws.close()
    sets = len({key[:2] for key in keys})
    assert stages.counts[DRAW_WAIT] == stages.counts[DRAW_MOVE] == sets and stages.seconds[DRAW_WAIT] > 0
    assert NESTED["inputs"] == (DRAW_WAIT, DRAW_MOVE)


@pytest.mark.parametrize("page_size", [1, 2, 4, 16])
def test_each_token_sits_in_the_slot_of_the_token_by_token_layout(page_size):
    """build_batch's page layout, computed per page, is the token-by-token one it replaced: a request's new tokens
    go on from its prefix (into the prefix's last page while it has room, e.g. decode's prefix of 9), a new page
    at each page start past its pages; every token's k and v sit in that slot of the caches."""
    spec = spec_from_dict(small(page_size=page_size))
    for case in spec.cases:
        batch = build_batch(spec, case)
        flat = batch.full.indices.tolist()
        for i, name in enumerate(batch.requests):
            req = spec.request(name)
            pages = flat[batch.full.indptr[i]:batch.full.indptr[i + 1]]
            n_pre = len(batch.prefix.indices[batch.prefix.indptr[i]:batch.prefix.indptr[i + 1]])
            expected, pos = pages[:n_pre], req.prefix_len  # the loop build_batch had, page by page
            slots = []
            for _ in range(req.qo_len):
                if pos % page_size == 0 and pos // page_size >= len(expected):
                    expected.append(pages[len(expected)])
                slots.append((expected[pos // page_size], pos % page_size))
                pos += 1
            assert len(expected) == len(pages) == -(-(req.prefix_len + req.qo_len) // page_size), (case, name)
            rows = batch.k[batch.span(i)]
            for t, (page, offset) in enumerate(slots):
                assert torch.equal(batch.k_cache[page, offset], rows[t]), (case, name, t)
