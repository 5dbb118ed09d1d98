"""The pinned ring the draw threads write value sets into (kernels/pinned_ring.py): blocks are reserved in order,
given back only once the copy that read them is done, reused from the start when the end is reached, and a set that
finds no room is drawn into pageable memory, with the same bits either way."""

import torch

from detrun.kernels.inputs import Draws, build_batch, draw_keys
from detrun.kernels.pinned_ring import ALIGN, PinnedRing
from detrun.spec.model import spec_from_dict
from tests.helpers import small


class Copy:
    """A stand-in for a CUDA event: done once the test says its copy finished."""

    def __init__(self):
        self.done = False

    def record(self):
        pass

    def query(self):
        return self.done


def ring(blocks: int) -> PinnedRing:
    return PinnedRing(blocks * ALIGN, pinned=False, new_event=Copy)


def test_a_block_is_reused_only_after_its_copy_is_done():
    r = ring(3)
    a, b, c = (r.reserve((ALIGN,), torch.uint8) for _ in range(3))
    assert [x[0].start for x in (a, b, c)] == [0, ALIGN, 2 * ALIGN]
    assert r.reserve((1,), torch.uint8) is None  # full
    r.fence(a[0])
    assert r.reserve((1,), torch.uint8) is None  # a's copy is queued, not done
    a[0].fence.done = True
    d = r.reserve((1,), torch.uint8)
    assert d is not None and d[0].start == 0  # wrapped to the start, where a was


def test_blocks_are_given_back_in_order_and_a_set_too_big_for_the_gap_waits():
    r = ring(4)
    a, b = r.reserve((2 * ALIGN,), torch.uint8), r.reserve((ALIGN,), torch.uint8)
    r.fence(b[0])
    b[0].fence.done = True
    assert r.reserve((2 * ALIGN,), torch.uint8) is None  # b is done but a (older) is not: only one block left
    r.fence(a[0])
    a[0].fence.done = True
    assert r.reserve((4 * ALIGN,), torch.uint8)[0].start == 0  # both given back: the whole ring
    assert r.reserve((5 * ALIGN,), torch.uint8) is None


def test_a_view_has_the_shape_and_dtype_asked_and_blocks_never_overlap():
    r = ring(8)
    x, y = r.reserve((3, 5, 7), torch.bfloat16), r.reserve((2, 4), torch.float32)
    assert x[1].shape == (3, 5, 7) and x[1].dtype == torch.bfloat16 and y[1].shape == (2, 4)
    x[1].fill_(1.0)
    y[1].fill_(2.0)
    assert torch.all(x[1] == 1.0) and x[0].end <= y[0].start and x[0].start % ALIGN == y[0].start % ALIGN == 0


def test_draws_through_a_ring_have_the_bits_of_pageable_draws_and_fall_back_when_it_is_full():
    """Every set drawn into the ring or, once it is full, into pageable memory: the batches equal those of draws
    with no ring, each ring block is fenced once its set is moved, and the blocks of moved sets are reused."""
    spec = spec_from_dict(small())
    keys = [key for case in spec.cases for key in draw_keys(spec, case)]
    biggest = max(n * heads * spec.head_dim * 2 for _, _, n, heads in keys)  # bf16
    r = ring(-(-biggest // ALIGN) + 1)  # the biggest set and a little: a case's other sets find it full
    draws, plain = Draws(spec, "cpu", threads=2, ring=r), Draws(spec, "cpu", threads=2)
    reserved, fenced = [], []
    real_reserve, real_fence = r.reserve, r.fence
    r.reserve = lambda *a: reserved.append(real_reserve(*a)) or reserved[-1]
    r.fence = lambda block: fenced.append(block) or real_fence(block)
    for case in spec.cases:
        ringed, fresh = build_batch(spec, case, "cpu", draws), build_batch(spec, case, "cpu", plain)
        for name in ("q", "k", "v", "k_cache", "v_cache"):
            assert torch.equal(getattr(ringed, name), getattr(fresh, name)), (case, name)
        for block in fenced:
            block.fence.done = True
    draws.close()
    plain.close()
    got = [x for x in reserved if x is not None]
    assert got and len(got) < len(reserved)  # some sets in the ring, some found it full (pageable)
    assert sorted(id(b) for b in fenced) == sorted(id(b) for b, _ in got)  # each ring set fenced once, when moved
    assert len({b.start for b, _ in got}) < len(got)  # blocks reused after their copies were done


def test_a_task_on_a_gpu_with_cpu_draws_gets_a_ring_of_the_size_set_or_of_its_sets(monkeypatch):
    """DETRUN_DRAW_RING_MB sizes the ring, or the bytes of the cells' sets when they take less; unset or 0 (off until
    measured on a GPU), counter draws, no cells (an isolated worker's) or a task on the CPU: no ring."""
    from detrun.envflags import TaskFlags
    from detrun.kernels.inputs import ring_bytes
    from detrun.run import worker
    from detrun.spec.matrix import cells_for
    from detrun.stages import PINNED_RING, Stages

    monkeypatch.setattr(worker, "PinnedRing", lambda nbytes: ("ring", nbytes))
    runner = object.__new__(worker.ShardRunner)
    runner.device, runner.spec, runner.stages = torch.device("cuda"), spec_from_dict(small()), Stages()
    cells = list(cells_for(runner.spec, (0,)))
    sets = ring_bytes(runner.spec, runner.spec.cases)
    keys = {key[:2]: key for case in runner.spec.cases for key in draw_keys(runner.spec, case)}
    assert sets == sum(-(-n * h * runner.spec.head_dim * 2 // ALIGN) * ALIGN for _, _, n, h in keys.values())
    assert sets < 1 << 20  # the small job's sets: well under a MiB
    runner.flags = TaskFlags.parse({})
    assert runner._ring(cells, 8) is None  # unset: off
    runner.flags = TaskFlags.parse({"DETRUN_DRAW_RING_MB": "1024"})
    assert runner._ring(cells, 8) == ("ring", sets) and runner.stages.counts[PINNED_RING] == 1
    assert runner._ring(cells, 1) is None  # one draw thread: the sets are drawn on the task's thread, no ring
    big = spec_from_dict(small(requests={"long": {"qo_len": 1 << 16}}, cases={"only": ["long"]}))
    runner.spec = big  # q: 65536 rows x 4 heads x 32 x 2 bytes = 16 MiB; k and v: 8 MiB each
    assert runner._ring(list(cells_for(big, (0,))), 8) == ("ring", 32 << 20)
    runner.flags = TaskFlags.parse({"DETRUN_DRAW_RING_MB": "16"})
    assert runner._ring(list(cells_for(big, (0,))), 8) == ("ring", 16 << 20)
    runner.spec = spec_from_dict(small())
    assert runner._ring([], 8) is None
    runner.flags = TaskFlags.parse({"DETRUN_DRAW_RING_MB": "0"})
    assert runner._ring(cells, 8) is None
    runner.flags, runner.spec = TaskFlags.parse({"DETRUN_DRAW_RING_MB": "1024"}), spec_from_dict(small(draws="counter"))
    assert runner._ring(cells, 8) is None
    runner.spec, runner.device = spec_from_dict(small()), torch.device("cpu")
    assert runner._ring(cells, 8) is None


def test_a_task_whose_pinned_memory_is_refused_goes_on_without_a_ring_and_says_so(monkeypatch):
    """A refused allocation (cudaHostAlloc's error is a RuntimeError in torch) leaves the task with no ring and a note
    naming the setting, not a failed task."""
    from detrun.envflags import TaskFlags
    from detrun.kernels.inputs import ring_bytes
    from detrun.run import worker
    from detrun.spec.matrix import cells_for
    from detrun.stages import Stages

    def refused(nbytes):
        raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")

    monkeypatch.setattr(worker, "PinnedRing", refused)
    runner = object.__new__(worker.ShardRunner)
    runner.device, runner.spec, runner.stages = torch.device("cuda"), spec_from_dict(small()), Stages()
    runner.flags, runner.ring_note = TaskFlags.parse({"DETRUN_DRAW_RING_MB": "1024"}), ""
    cells = list(cells_for(runner.spec, (0,)))
    assert runner._ring(cells, 8) is None
    size = ring_bytes(runner.spec, runner.spec.cases)
    assert runner.ring_note.startswith(f"DETRUN_DRAW_RING_MB: {size:,} bytes of pinned memory not allocated "
                                       "(RuntimeError: CUDA error: out of memory); the drawn sets are copied from")
    assert "out of memory" in runner.ring_note and "\n" not in runner.ring_note
