"""Pinned draws (kernels/host_pins.py): a set drawn on a thread goes to pinned memory allocated outside any CUDA graph
capture (the capture holds the gate alone), keeps its bits, and moves without the task's thread waiting."""

import contextlib
import threading
import time

import torch

from detrun.kernels import host_pins
from detrun.kernels.backends import base
from detrun.kernels.inputs import Draws, build_batch
from detrun.spec.model import spec_from_dict
from tests.helpers import small


def _holds(gate: host_pins.Gate, how: str, entered: threading.Event, leave: threading.Event) -> threading.Thread:
    def hold() -> None:
        with getattr(gate, how)():
            entered.set()
            leave.wait(5)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def test_the_gate_keeps_a_capture_alone_and_a_waiting_capture_stops_new_allocations():
    gate = host_pins.Gate()
    a_in, a_out, b_in, b_out = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    first = _holds(gate, "shared", a_in, a_out)
    assert a_in.wait(5)
    second = _holds(gate, "shared", b_in, b_out)
    assert b_in.wait(5)  # allocations share the gate
    c_in, c_out = threading.Event(), threading.Event()
    capture = _holds(gate, "alone", c_in, c_out)
    time.sleep(0.1)
    assert not c_in.is_set()  # the capture waits for the allocations in progress
    d_in, d_out = threading.Event(), threading.Event()
    late = _holds(gate, "shared", d_in, d_out)
    time.sleep(0.1)
    assert not d_in.is_set()  # an allocation after the capture asked waits for it
    a_out.set()
    b_out.set()
    assert c_in.wait(5)
    time.sleep(0.1)
    assert not d_in.is_set()  # nothing shares the gate with a capture
    c_out.set()
    assert d_in.wait(5)
    d_out.set()
    for t in (first, second, capture, late):
        t.join(5)


def _pinned_on_cpu(monkeypatch, log):
    """torch.empty(pin_memory=True) stood in by a plain tensor (no CUDA here); each call logs the gate's state."""
    real = torch.empty

    def empty(*shape, pin_memory=False, **kw):
        if pin_memory:
            log.append((host_pins.GATE._shared, host_pins.GATE._alone))
        return real(*shape, **kw)

    monkeypatch.setattr(torch, "empty", empty)


def test_sets_drawn_into_pinned_memory_keep_their_bits_and_are_allocated_under_the_gate(monkeypatch):
    log: list = []
    _pinned_on_cpu(monkeypatch, log)
    moves = []
    real_to = torch.Tensor.to

    def to(self, *a, **kw):
        moves.append(kw.get("non_blocking", False))
        return real_to(self, *a, **kw)

    spec = spec_from_dict(small())
    plain, pinned = Draws(spec, "cpu", threads=2), Draws(spec, "cpu", threads=2, pin=True)
    for case in spec.cases:
        a = build_batch(spec, case, "cpu", plain)
        monkeypatch.setattr(torch.Tensor, "to", to)
        b = build_batch(spec, case, "cpu", pinned)
        monkeypatch.setattr(torch.Tensor, "to", real_to)
        for name in ("q", "k", "v", "k_cache", "v_cache"):
            assert torch.equal(getattr(a, name), getattr(b, name)), (case, name)
    assert len(log) == len(pinned.cache) > 0  # every set pinned once
    assert all(shared >= 1 and not alone for shared, alone in log)  # under the gate, shared, never in a capture
    assert moves.count(True) == len(pinned.cache)  # each set's move is queued, not waited for
    assert pinned.close() == 0 and plain.close() == 0  # no CUDA context here: nothing to give back
    assert not Draws(spec, "cpu", threads=2).pin and not Draws(spec, "cuda", threads=1).pin  # a GPU and threads only
    assert Draws(spec, "cuda", threads=2).pin


def test_a_pinned_allocation_on_another_thread_waits_out_a_graph_capture(monkeypatch):
    """base.capture (every backend's CUDA graph capture) holds the gate alone around the captured forward: a draw
    thread's pinned allocation started meanwhile completes only after the capture ended."""
    log: list = []
    _pinned_on_cpu(monkeypatch, log)
    events = []

    class Stream:
        def __init__(self, device=None, priority=0):
            pass

        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def graph(g):
        events.append("capture begins")
        yield
        events.append("capture ends")

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(torch.cuda, "graph", graph)
    capturing = threading.Event()

    def forward():
        if events and events[-1] == "capture begins":  # the captured run (the first is the warm-up)
            capturing.set()
            time.sleep(0.2)
            events.append("forward captured")
        return (torch.zeros(1),)

    def allocate():
        capturing.wait(5)
        host_pins.pinned_empty((4,), torch.float32)
        events.append("pinned")

    thread = threading.Thread(target=allocate)
    thread.start()
    base.capture(forward, torch.device("cuda"))
    thread.join(5)
    assert events == ["capture begins", "forward captured", "capture ends", "pinned"]
    assert log == [(1, False)]
