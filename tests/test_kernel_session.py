"""The kernel audit's one profiler session (kernel_session.py): a profiled cell's kernels are the device events
on its markers' stream between its two markers; the FlashInfer backend records its cells' own runs that way in
the task's profile window, and the worker closes the session between cells and before the rows leave."""

import json
import os

import pytest
import torch

from detrun.envflags import TaskFlags
from detrun.kernels.backends.kernel_session import MARKER, ProfileError, ProfileSession, split_by_markers
from detrun.kernels.backends.plan_layouts import FA2_PLAN_FIELDS
from detrun.kernels.inputs import build_batch
from detrun.spec.matrix import Shard, cells_for
from detrun.spec.model import spec_from_dict
from detrun.stages import PROFILE_START, PROFILE_STOP
from tests.helpers import FakePrefillWrapper, fake_flashinfer, small

SPIN = f"at::cuda::(anonymous namespace)::{MARKER}(long)"


def test_a_cells_kernels_are_the_events_on_its_stream_between_its_markers():
    events = [
        (10, 7, SPIN), (12, 7, "BatchPrefillWithPagedKVCacheKernel"), (15, 7, "Memcpy DtoD"),
        (14, 3, "_lanes_kernel"),  # an earlier cell's digest on its own stream, inside the window in time
        (11, 9, "warm-up on a side stream"), (20, 7, SPIN),
        (25, 7, "not profiled: between the pairs"),
        (30, 7, SPIN), (35, 7, "MergeStatesKernel"), (36, 7, "MergeStatesKernel"), (40, 7, SPIN),
        (45, 7, "after the last marker"),
    ]
    assert split_by_markers(events, 2) == [["BatchPrefillWithPagedKVCacheKernel", "Memcpy DtoD"],
                                           ["MergeStatesKernel"]]
    long_name = "k" * 400
    assert split_by_markers([(1, 0, SPIN), (2, 0, long_name), (3, 0, SPIN)], 1) == [["k" * 300]]


def test_markers_that_do_not_pair_with_the_cells_are_an_error():
    with pytest.raises(ProfileError, match="3 markers for 2 profiled cells"):
        split_by_markers([(1, 0, SPIN), (2, 0, "a"), (3, 0, SPIN), (4, 0, SPIN)], 2)
    with pytest.raises(ProfileError, match="two streams"):
        split_by_markers([(1, 0, SPIN), (2, 0, "a"), (3, 5, SPIN)], 1)
    with pytest.raises(ProfileError, match="no device event on the markers' stream"):  # streams mislabelled
        split_by_markers([(1, 0, SPIN), (2, 4, "a"), (3, 0, SPIN), (4, 0, SPIN), (5, 4, "b"), (6, 0, SPIN)], 2)
    assert split_by_markers([(1, 0, SPIN), (2, 0, SPIN), (3, 0, SPIN), (4, 0, "b"), (6, 0, SPIN)], 2) == [[], ["b"]]


class Recorder:
    """A stand-in profiler and marker on the CPU: every launch is an event of stream 1 at the next tick."""

    def __init__(self):
        self.events, self.started, self.stopped = [], 0, 0

    def launch(self, name: str, stream: int = 1) -> None:
        self.events.append((len(self.events), stream, name))

    def session(self, marker=None) -> ProfileSession:
        rec = self

        class Prof:
            def start(self):
                rec.started += 1

            def stop(self):
                rec.stopped += 1

        return ProfileSession(torch.device("cpu"), profiler=Prof, marker=marker or (lambda: self.launch(SPIN)),
                              events=lambda prof: list(self.events))


def test_a_session_fills_each_cells_list_at_close_even_for_a_cell_whose_run_raised():
    rec = Recorder()
    session = rec.session()
    with session.cell() as first:
        rec.launch("kernel A")
    with pytest.raises(ValueError):
        with session.cell() as second:
            rec.launch("kernel B")
            raise ValueError("the cell failed")
    rec.launch("a later cell, not profiled")
    assert first == [] and second == [] and rec.started == 1
    session.close()
    assert first == ["kernel A"] and second == ["kernel B"] and rec.stopped == 1


def test_a_missing_closing_marker_leaves_the_lists_empty_and_says_why():
    rec = Recorder()
    calls = []

    def marker():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        rec.launch(SPIN)

    session = rec.session(marker)
    with session.cell() as names:
        rec.launch("kernel A")
    with pytest.raises(ProfileError, match="no closing marker: CUDA error"):
        session.close()
    assert names == [] and rec.stopped == 1


@pytest.fixture
def session_backend(monkeypatch):
    """The FlashInfer backend on the CPU (stand-in flashinfer) with its session allowed and recorded by a
    Recorder; the stand-in wrappers' run() launches one kernel event named after the wrapper."""
    fake_flashinfer(monkeypatch)
    rec = Recorder()
    run = FakePrefillWrapper.run

    def launching(self, *args, **kwargs):
        rec.launch(f"BatchPrefillWith{type(self).__name__[4:]}KVCacheKernel")
        return run(self, *args, **kwargs)

    def plan(self, *args, **kwargs):  # an FA2 plan that says whether it is a graph's, as FlashInfer's does
        planned(self, *args, **kwargs)
        self._plan_info[FA2_PLAN_FIELDS.index("enable_cuda_graph")] = int(self.graph)

    planned = FakePrefillWrapper.plan
    monkeypatch.setattr(FakePrefillWrapper, "run", launching)
    monkeypatch.setattr(FakePrefillWrapper, "plan", plan)
    monkeypatch.setenv("SGLANG_FLASHINFER_USE_PAGED", "1")
    from detrun.kernels.backends.flashinfer import FlashInferBackend

    monkeypatch.setattr(FlashInferBackend, "_session_here", lambda self: True)
    monkeypatch.setattr(FlashInferBackend, "_open_session", lambda self: rec.session())
    return rec


def _backend(**opts):
    from detrun.kernels.backends.flashinfer import FlashInferBackend

    spec = spec_from_dict(small(flashinfer={"workspace_mb": 16, "profile_kernels": True, **opts}))
    return spec, FlashInferBackend(spec, torch.device("cpu"), flags=TaskFlags.parse(os.environ))


def test_the_backend_records_each_profiled_cells_own_run_and_never_runs_it_again(session_backend):
    rec = session_backend
    spec, be = _backend(profile_repeats=1)
    be._kernels = lambda run, graph: pytest.fail("a profiled cell ran again")
    batch = build_batch(spec, "alone")
    first = be.forward(batch, "eager", repeat=0)
    again = be.forward(batch, "eager", repeat=0)  # the same plan: not profiled
    graph = be.forward(batch, "cudagraph", repeat=0)
    assert be.session_open and rec.started == 1
    assert first.kernels == [] and graph.kernels == []  # named at close
    runs = sum(1 for e in rec.events if "KVCacheKernel" in e[2])
    later = be.forward(batch, "eager", repeat=1)  # past the window: the session closes first
    assert not be.session_open and rec.stopped == 1
    assert first.kernels == ["BatchPrefillWithPagedKVCacheKernel"] and graph.kernels == first.kernels
    assert again.kernels == [] and later.kernels == []
    assert runs == 3  # each cell ran once: no second run for the profile
    assert sum(1 for e in rec.events if e[2] == SPIN) == 4


def test_without_a_bounded_window_each_profiled_cell_is_profiled_alone(session_backend):
    spec, be = _backend(profile_repeats=None)
    be._kernels = lambda run, graph: ["BatchPrefillWithPagedKVCacheKernel"]
    out = be.forward(build_batch(spec, "alone"), "eager", repeat=0)
    assert not be.session_open and out.kernels == ["BatchPrefillWithPagedKVCacheKernel"]
    assert session_backend.started == 0


def test_the_worker_closes_the_session_between_cells_and_before_its_rows_leave(session_backend, monkeypatch):
    """Rows of the first repeat hold the kernel names (filled at close); a close that fails leaves them empty
    and says why in the task's note."""
    from detrun.run import worker
    from detrun.run.worker import ShardRunner
    from detrun.stages import STEADY_CELL

    monkeypatch.setattr(worker, "resolve_backend", lambda *a, **k: ("flashinfer", ""))  # CPU, stand-in flashinfer
    data = small(backend="flashinfer", modes=["eager"], repeats=2, flashinfer={"profile_kernels": True,
                                                                                  "workspace_mb": 16})
    spec = spec_from_dict(data)
    runner = ShardRunner(spec, Shard(0, (0, 1)), "ks1")
    assert runner.backend_name == "flashinfer"
    closes = []
    close = type(runner.backend).close_profile

    def timed_close(self):
        closes.append(runner.stages.counts.get(STEADY_CELL, 0))
        close(self)

    monkeypatch.setattr(type(runner.backend), "close_profile", timed_close)
    result = runner.run(list(cells_for(spec, (0, 1))))
    rows = result["rows"]
    first = [r for r in rows if r["repeat"] == 0]
    plans = {(r["path"], r["plan"]) for r in first}
    named = {(r["path"], r["plan"]) for r in first if r["kernels"]}
    assert plans and named == plans  # every plan of the window has its kernels
    assert all(r["kernels"] == [] for r in rows if r["repeat"] == 1)
    assert closes[0] == 0  # closed before the first steady cell, between cells
    assert runner.stages.counts[PROFILE_START] == runner.stages.counts[PROFILE_STOP] == 1  # one session
    assert json.dumps(rows)  # plain values

    session_backend.events.clear()
    session_backend.launch(SPIN)  # a stray marker: the pairs no longer match the cells
    runner = ShardRunner(spec, Shard(0, (0, 1)), "ks2")
    result = runner.run(list(cells_for(spec, (0, 1))))
    assert all(r["kernels"] == [] for r in result["rows"])
    assert "markers for" in result["note"]

