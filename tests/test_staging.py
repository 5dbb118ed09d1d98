"""Pinned staging buffers for FlashInfer's plan(): a plan never rewrites a buffer whose copy may not have run,
and waits for no other copy (kernels/backends/staging.py)."""

import types

import torch

from detrun.kernels.backends.staging import PINNED, PlanStaging
from detrun.stages import PLAN_WAIT, Stages

WAIT_S, PLAN_S = 0.25, 1.0  # what a wait for a fence and a plan take on the tests' clock


class Clock:
    """perf_counter for staging.py and stages.py: time passes only as the fences and plans say."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now


class Fence:
    """A CUDA event stand-in: logs its record and the host's waits for it (each takes WAIT_S on the clock)."""

    made = 0

    def __init__(self, log, clock=None):
        Fence.made += 1
        self.n, self.log, self.clock = Fence.made, log, clock

    def record(self):
        self.log.append(f"record {self.n}")

    def synchronize(self):
        self.log.append(f"wait {self.n}")
        if self.clock is not None:
            self.clock.now += WAIT_S


def staged(log):
    Fence.made = 0
    return PlanStaging(Stages(), True, new_fence=lambda: Fence(log), new_buffer=lambda t: torch.zeros_like(t))


def wrapper():
    return types.SimpleNamespace(**{PINNED: torch.zeros(8, dtype=torch.uint8)})


def plan(staging, w, slots, log, name, clock=None):
    """One plan() of w under staging; on a clock it takes PLAN_S (time the host spends planning, not waiting)."""
    with staging.plan(w, slots):
        log.append(f"plan {name} into {id(getattr(w, PINNED))}")
        if clock is not None:
            clock.now += PLAN_S
        return getattr(w, PINNED)


def test_an_eager_wrapper_rotates_its_buffers_and_waits_only_for_the_copy_from_the_one_it_reuses(monkeypatch):
    log, clock = [], Clock()
    for module in ("detrun.kernels.backends.staging", "detrun.stages"):
        monkeypatch.setattr(f"{module}.time", clock)
    Fence.made = 0
    st = PlanStaging(Stages(), True, new_fence=lambda: Fence(log, clock), new_buffer=lambda t: torch.zeros_like(t))
    w = wrapper()
    own = getattr(w, PINNED)
    used = [plan(st, w, 3, log, i, clock) for i in range(5)]
    assert used[0] is own and len({id(t) for t in used[:3]}) == 3  # three buffers, the wrapper's own first
    assert used[3] is used[0] and used[4] is used[1]  # then round the ring
    # no wait until a buffer comes round again; then only for the fence recorded after its own last plan
    waits = [x for x in log if x.startswith("wait")]
    assert waits == ["wait 1", "wait 2"]
    assert log.index("record 3") < log.index("wait 1") < log.index(f"plan 3 into {id(own)}")
    # waited: the host's seconds in those two waits, not the 5 plans' time
    assert st.stages.counts[PLAN_WAIT] == 2 and st.waited == st.stages.seconds[PLAN_WAIT] == 2 * WAIT_S


def test_one_slot_fences_each_plan_behind_the_last_and_wrappers_do_not_wait_for_each_other():
    log = []
    st, graph, other = staged(log), wrapper(), wrapper()
    own = getattr(graph, PINNED)
    plan(st, graph, 1, log, "g1")
    plan(st, other, 1, log, "o1")
    assert not [x for x in log if x.startswith("wait")]  # another wrapper's copy is no reason to wait
    assert plan(st, graph, 1, log, "g2") is own  # a graph wrapper keeps its own buffer
    assert log[-3:] == ["wait 1", f"plan g2 into {id(own)}", "record 3"]


def test_a_wrapper_without_the_known_buffer_is_fenced_and_left_alone():
    log = []
    st, w = staged(log), types.SimpleNamespace()
    with st.plan(w, 3):
        pass
    with st.plan(w, 3):
        pass
    assert log == ["record 1", "wait 1", "record 2"] and not hasattr(w, PINNED)


def test_off_a_gpu_nothing_is_staged():
    st, w = PlanStaging(Stages(), False), wrapper()
    own = getattr(w, PINNED)
    for _ in range(3):
        with st.plan(w, 3):
            pass
    assert getattr(w, PINNED) is own and not st.rings
