"""Pinned staging buffers for FlashInfer's plan(): a plan never rewrites a buffer whose copy may not have run,
and waits for no other copy (kernels/backends/staging.py)."""

import types

import torch

from detrun.kernels.backends.staging import PINNED, PlanStaging
from detrun.stages import PLAN_WAIT, Stages


class Fence:
    """A CUDA event stand-in: logs its record and the host's waits for it."""

    made = 0

    def __init__(self, log):
        Fence.made += 1
        self.n, self.log = Fence.made, log

    def record(self):
        self.log.append(f"record {self.n}")

    def synchronize(self):
        self.log.append(f"wait {self.n}")


def staged(log):
    Fence.made = 0
    return PlanStaging(Stages(), True, new_fence=lambda: Fence(log), new_buffer=lambda t: torch.zeros_like(t))


def wrapper():
    return types.SimpleNamespace(**{PINNED: torch.zeros(8, dtype=torch.uint8)})


def plan(staging, w, slots, log, name):
    with staging.plan(w, slots):
        log.append(f"plan {name} into {id(getattr(w, PINNED))}")
        return getattr(w, PINNED)


def test_an_eager_wrapper_rotates_its_buffers_and_waits_only_for_the_copy_from_the_one_it_reuses():
    log = []
    st, w = staged(log), wrapper()
    own = getattr(w, PINNED)
    used = [plan(st, w, 3, log, i) for i in range(5)]
    assert used[0] is own and len({id(t) for t in used[:3]}) == 3  # three buffers, the wrapper's own first
    assert used[3] is used[0] and used[4] is used[1]  # then round the ring
    # no wait until a buffer comes round again; then only for the fence recorded after its own last plan
    waits = [x for x in log if x.startswith("wait")]
    assert waits == ["wait 1", "wait 2"]
    assert log.index("record 3") < log.index("wait 1") < log.index(f"plan 3 into {id(own)}")
    assert st.stages.counts[PLAN_WAIT] == 2 and st.waited >= 0


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
