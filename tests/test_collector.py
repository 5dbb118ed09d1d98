"""The garbage collector during a task's cells: every collection timed as a stage (beside the wall's sum),
the heap alive at the start and at each settle() frozen, all unfrozen and the callback gone at the end."""

import gc

from detrun.run.collector import Collector
from detrun.run.worker import run_shard
from detrun.spec.matrix import Shard
from detrun.stages import GC_PAUSE, GC_ROW, Stages, breakdown
from tests.helpers import small


def test_collections_are_timed_and_the_heap_frozen_while_cells_run():
    stages = Stages()
    assert gc.get_freeze_count() == 0
    with Collector(stages) as collector:
        frozen = gc.get_freeze_count()
        assert frozen > 0  # everything alive at entry
        gc.collect()
        gc.collect(0)
        assert stages.counts[GC_PAUSE] == 2 and stages.seconds[GC_PAUSE] > 0
        young = [[i] for i in range(1000)]
        collector.settle()
        assert gc.get_freeze_count() >= frozen + 1000 and young
        timed = stages.counts[GC_PAUSE]
    assert gc.get_freeze_count() == 0 and all(cb != collector._pause for cb in gc.callbacks)
    gc.collect()
    assert stages.counts[GC_PAUSE] == timed  # no longer timed


def test_without_freeze_collections_are_only_timed():
    stages = Stages()
    with Collector(stages, freeze=False) as collector:
        collector.settle()
        assert gc.get_freeze_count() == 0
        gc.collect()
    assert stages.counts[GC_PAUSE] == 1


def test_a_shard_records_its_gc_pauses_beside_the_stages_and_unfreezes():
    gc.set_threshold(1, 1, 1)  # collect often, so the shard's cells meet some
    try:
        timings = run_shard(small(modes=["eager"], repeats=1), Shard(0, (0,)), "gc1")["timings"]
    finally:
        gc.set_threshold(700, 10, 10)
    assert timings["stages"][GC_PAUSE]["n"] > 0 and gc.get_freeze_count() == 0
    rows = {name: (s, n) for name, s, n in breakdown({}, {"g0": timings})}
    assert rows[GC_ROW] == (timings["stages"][GC_PAUSE]["s"], timings["stages"][GC_PAUSE]["n"])
    assert GC_PAUSE not in rows


def test_without_freeze_a_heap_frozen_by_someone_else_stays_frozen(monkeypatch):
    # Not the freeze count before == after: a frozen object freed meanwhile (another thread's) lowers it (a flake)
    unfrozen = []
    gc.freeze()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(gc, "unfreeze", lambda: unfrozen.append(True))
            with Collector(Stages(), freeze=False):
                pass
        assert unfrozen == [] and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
