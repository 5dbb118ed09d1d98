"""FlashInferBackend's wrapper handling on the CPU, against a stand-in flashinfer module: which wrappers
each path uses, that CUDA-graph wrappers are built once per (case, path) and re-planned before every
replay (as SGLang does), that eager cells re-plan the shared eager wrappers, and that kernel names are
profiled once per distinct (path, plan) in a task."""

import json
import os

import pytest
import torch

from detrun.envflags import TaskFlags
from detrun.kernels.backends.base import PATH_PAGED, PATH_RAGGED_PREFIX
from detrun.kernels.backends.plan_layouts import FA2_PLAN_FIELDS, FA2_PLAN_KEEP
from detrun.kernels.inputs import build_batch
from detrun.spec.model import spec_from_dict
from tests.helpers import FakeGraph, FakePaged, FakePrefillWrapper, fake_flashinfer, small


@pytest.fixture
def backend(monkeypatch):
    fake_flashinfer(monkeypatch)

    def make(paged: bool, **opts):
        monkeypatch.setenv("SGLANG_FLASHINFER_USE_PAGED", "1" if paged else "0")
        from detrun.kernels.backends.flashinfer import FlashInferBackend

        spec = spec_from_dict(small(flashinfer={"workspace_mb": 16, "profile_kernels": False, **opts}))
        return spec, FlashInferBackend(spec, torch.device("cpu"), flags=TaskFlags.parse(os.environ))

    return make


def test_graph_wrappers_built_once_and_replanned_every_replay(backend):
    spec, be = backend(paged=True)
    eager = list(FakePrefillWrapper.made)  # the backend's two eager wrappers
    batch = build_batch(spec, "alone")
    outs = [be.forward(batch, "cudagraph", repeat=r) for r in range(3)]
    graph = [w for w in FakePrefillWrapper.made if w.graph]
    assert len(graph) == 1 and isinstance(graph[0], FakePaged) and graph[0].plans == 3
    assert FakeGraph.captures == 1 and outs[0].path == PATH_PAGED
    assert all(torch.equal(o.out, outs[0].out) for o in outs)
    be.forward(batch, "eager")
    assert len(FakePrefillWrapper.made) == 3 and eager[0].plans == 1  # eager: the shared paged wrapper, re-planned


def test_ragged_prefix_path_plans_both_graph_wrappers_each_time(backend):
    spec, be = backend(paged=False)
    batch = build_batch(spec, "prefix_alone")
    for r in range(2):
        out = be.forward(batch, "cudagraph", repeat=r)
    graph = [w for w in FakePrefillWrapper.made if w.graph]
    assert out.path == PATH_RAGGED_PREFIX and sorted(type(w).__name__ for w in graph) == ["FakePaged", "FakeRagged"]
    assert [w.plans for w in graph] == [2, 2] and FakeGraph.captures == 1
    prefix = next(w for w in graph if isinstance(w, FakePaged))
    assert prefix.causal is False  # the prefix part attends to all of the cached prefix
    assert set(out.plan) == {p + k for p in ("", "prefix.") for k in ("backend",) + FA2_PLAN_KEEP}
    be.forward(build_batch(spec, "alone"), "cudagraph")
    graphs = [w for w in FakePrefillWrapper.made if w.graph]
    assert FakeGraph.captures == 2 and len(graphs) == 3  # another case: its own


def _plan_per_batch_size(self, qo_indptr, *args, **kwargs):
    """An FA2 plan whose fields follow the batch: padded_batch_size = its requests; enable_cuda_graph."""
    info = dict.fromkeys(FA2_PLAN_FIELDS, 0)
    info.update(padded_batch_size=len(qo_indptr) - 1, enable_cuda_graph=int(self.graph))
    self.plans, self._plan_info = self.plans + 1, list(info.values())


def test_kernels_are_profiled_once_per_distinct_path_and_plan(backend, monkeypatch):
    monkeypatch.setattr(FakePrefillWrapper, "plan", _plan_per_batch_size)

    def profiler(be):
        calls = []
        monkeypatch.setattr(be, "_kernels", lambda run, graph: calls.append(graph) or ["BatchPrefillWithPagedKVCache"])
        return calls

    spec, be = backend(paged=True, profile_kernels=True, profile_repeats=2)
    calls = profiler(be)
    batches = {case: build_batch(spec, case) for case in spec.cases}
    outs = {(case, mode, r): be.forward(batches[case], mode, repeat=r)
            for r in range(3) for case in spec.cases for mode in spec.modes}
    plans = {(o.path, json.dumps(o.plan, sort_keys=True)) for o in outs.values()}
    assert len(outs) == 30 and len(plans) == 8  # batch sizes 1, 3, 4, 1, 2, eager and graph
    assert sorted(calls) == [False] * 4 + [True] * 4  # one profile per plan, not per cell or repeat
    profiled = {cell for cell, o in outs.items() if o.kernels}  # prefix_alone's plans were alone's
    assert profiled == {(case, mode, 0) for case in ("alone", "mixed", "mixed_decode", "prefix_shared")
                        for mode in spec.modes}
    # profile_repeats still bounds it: a plan first met in a later repeat is not profiled
    spec, be = backend(paged=True, profile_kernels=True, profile_repeats=1)
    calls = profiler(be)
    assert be.forward(batches["mixed"], "eager", repeat=1).kernels == []
    assert be.forward(batches["alone"], "eager", repeat=0).kernels and calls == [False]
    assert be.forward(batches["prefix_alone"], "eager", repeat=0).kernels == [] and calls == [False]


def test_the_tasks_of_a_slot_share_the_profiling_each_plan_once(backend, monkeypatch):
    """A slot's repeats split among tasks (repeats_per_task): each task profiles, in its own first repeat, the
    plans whose hash falls to it; together every plan once (the code before profiled all of them in the task
    holding repeat 0 and none in the others)."""
    from detrun.spec.matrix import profile_share, shards

    monkeypatch.setattr(FakePrefillWrapper, "plan", _plan_per_batch_size)
    spec, _ = backend(paged=True)
    split = spec.model_copy(update={"repeats": 6, "repeats_per_task": 3})
    tasks = shards(split, 1)
    assert [profile_share(split, t) for t in tasks] == [(0, 2), (1, 2)]
    assert profile_share(spec, shards(spec, 1)[0]) == (0, 1)
    profiled: dict = {}
    for task in tasks:
        _, be = backend(paged=True, profile_kernels=True, profile_repeats=1)
        be.profile_share, be.profile_from = profile_share(split, task), task.repeats[0]
        monkeypatch.setattr(be, "_kernels", lambda run, graph: ["BatchPrefillWithPagedKVCache"])
        batches = {case: build_batch(spec, case) for case in spec.cases}
        for r in task.repeats:
            for case in spec.cases:
                for mode in spec.modes:
                    out = be.forward(batches[case], mode, repeat=r)
                    if out.kernels:
                        assert r == task.repeats[0]  # in the task's first repeat only
                        profiled.setdefault((out.path, json.dumps(out.plan, sort_keys=True)), []).append(r)
    assert len(profiled) == 8 and all(len(at) == 1 for at in profiled.values())  # every plan, once
    assert {at[0] for at in profiled.values()} == {0, 3}  # both tasks took a share


def test_graph_outputs_are_cloned_only_for_a_reader_after_the_next_replay(backend):
    """A replay's outputs are the graph's own buffers (the digests, queued behind it, read them in stream
    order) unless the worker copies them to the host later (store_tensors), a profiled run rewrites them, or
    the digests run on another stream (keep_outputs)."""
    def made(**opts):
        spec, be = backend(paged=True, **opts)
        be.spec = spec.model_copy(update={"store_tensors": False})
        return spec, be

    spec, be = made()
    batch = build_batch(spec, "alone")
    FakeGraph.cloned = []
    be.forward(batch, "cudagraph", repeat=0)
    be.keep_outputs = True
    be.forward(batch, "cudagraph", repeat=1)
    spec, be = backend(paged=True)  # store_tensors: true, the default
    be.forward(batch, "cudagraph", repeat=0)
    spec, be = made(profile_kernels=True)
    be._kernels = lambda run, graph: ["BatchPrefillWithPagedKVCache"]
    be.forward(batch, "cudagraph", repeat=0)  # profiled: its first plan
    be.forward(batch, "cudagraph", repeat=1)  # the same plan again: not profiled
    assert FakeGraph.cloned == [False, True, True, True, False]
