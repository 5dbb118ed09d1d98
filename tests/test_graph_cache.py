"""CUDA-graph reuse: one capture per (case, path) and plan, replayed by later repeats; a new plan recaptures."""

import torch

from detrun.kernels.backends import base
from detrun.kernels.backends.reference import ReferenceBackend
from detrun.kernels.inputs import build_batch
from detrun.spec.model import spec_from_dict
from tests.helpers import FakeGraph, small


def _backend(monkeypatch, **overrides):
    monkeypatch.setattr(base, "capture", FakeGraph)
    FakeGraph.captures = 0
    spec = spec_from_dict(small(**overrides))
    return spec, ReferenceBackend(spec, torch.device("cpu"))


def test_repeats_replay_one_capture_per_case(monkeypatch):
    spec, be = _backend(monkeypatch, reference={"variant": "split_kv"})
    alone, mixed = (build_batch(spec, case) for case in ("alone", "mixed"))
    first = be.forward(alone, "cudagraph")
    again = be.forward(alone, "cudagraph", repeat=1)
    assert FakeGraph.captures == 1 and torch.equal(first.out, again.out)
    be.forward(mixed, "cudagraph")
    assert FakeGraph.captures == 2  # another case is another graph
    be.forward(alone, "eager")
    assert FakeGraph.captures == 2 and len(be.graphs) == 2


def test_a_changed_plan_recaptures(monkeypatch):
    spec, be = _backend(monkeypatch, reference={"variant": "split_kv"})
    batch = build_batch(spec, "mixed")
    be.forward(batch, "cudagraph")
    be.opts = be.opts.model_copy(update={"kv_tile": 2 * be.opts.kv_tile})  # the same case, another tiling
    be.forward(batch, "cudagraph")
    assert FakeGraph.captures == 2


def test_the_canary_recaptures_every_time(monkeypatch):
    """Its disorder is drawn on the host: a replay would freeze it and hide the negative control."""
    spec, be = _backend(monkeypatch, reference={"variant": "canary"})
    batch = build_batch(spec, "alone")
    be.forward(batch, "cudagraph")
    be.forward(batch, "cudagraph", repeat=1)
    assert FakeGraph.captures == 2
