"""A cell's digest launch replayed from a CUDA graph per layout (kernels/digest_graphs.py), on the CPU: the
Triton launch stands in as the torch path's lanes of the same parts, and a "graph" replays by running the
captured launch again, reading the tensors' words at replay time as a CUDA graph does. The GPU's own check
(the same bits as a plain launch, a flipped bit seen through a replay) is scripts/digest_graph_check.py."""

import sys
import types

import pytest
import torch

from detrun.envflags import TaskFlags
from detrun.kernels import digest, digest_graphs
from detrun.kernels.digest import PendingDigests, split_digests, torch_lanes
from detrun.kernels.digest_graphs import DigestGraphs
from detrun.stages import DIGEST_CAPTURE, DIGEST_REPLAY, Stages

BOUNDS, ROWS = [0, 3, 7, 12], [2, 6, 11]


def _lanes(parts, lanes, table=None):
    """digest_triton.triton_lanes by the torch path: each part's segments, numbered on."""
    at = 0
    for flat, counts, starts in parts:
        for count, start in zip(counts, starts):
            lanes[at] += torch_lanes(flat[start:start + count], [count])[0]
            at += 1
    return lanes


class Replayed:
    """A stand-in CUDA graph: replay() runs the captured work again."""

    def __init__(self, work, stream):
        self.work = work

    def replay(self):
        self.work()


@pytest.fixture
def triton_path(monkeypatch):
    fake = types.ModuleType("detrun.kernels.digest_triton")
    fake.triton_lanes, fake.lanes_table = _lanes, lambda parts, device: ("table",)
    monkeypatch.setitem(sys.modules, "detrun.kernels.digest_triton", fake)
    monkeypatch.setattr(digest, "digest_triton", fake, raising=False)
    monkeypatch.setenv("DETRUN_DIGEST", "triton")


def _cell():
    out = torch.randn(12, 4, 8).to(torch.bfloat16)
    return out, out[:, :, 0].float()


def _plain(out, lse):
    return split_digests([out, lse], BOUNDS, ROWS)


def test_a_layout_seen_twice_is_captured_then_replayed_with_a_plain_launchs_digests(triton_path):
    out, lse = _cell()
    expected = _plain(out, lse)
    stages = Stages()
    graphs = DigestGraphs(torch.device("cpu"), stages, record=Replayed)
    first = PendingDigests([out, lse], BOUNDS, ROWS, graphs)
    assert first.graph is None and first.names() == expected  # seen once: launched as before
    for n in (1, 2, 3):
        pending = PendingDigests([out, lse], BOUNDS, ROWS, graphs)
        assert pending.graph is not None
        assert pending.names() == expected
        assert stages.counts[DIGEST_CAPTURE] == 1 and stages.counts[DIGEST_REPLAY] == n
    assert len(graphs.layouts) == 1 and len(next(iter(graphs.layouts.values()))) == 1


def test_a_replay_digests_the_words_now_at_the_address_so_a_flipped_bit_shows(triton_path):
    out, lse = _cell()
    graphs = DigestGraphs(torch.device("cpu"), record=Replayed)
    for _ in range(2):
        before = PendingDigests([out, lse], BOUNDS, ROWS, graphs).names()
    out.view(torch.int16)[8, 1, 3] ^= 1  # request 2 (rows 7-11), not its last row
    after = PendingDigests([out, lse], BOUNDS, ROWS, graphs)
    assert after.graph is not None
    names = after.names()
    assert names == _plain(out, lse)
    assert [i for i, (a, b) in enumerate(zip(before[0], names[0])) if a != b] == [2]
    assert names[1] == before[1]


def test_a_graph_in_flight_is_not_replayed_again_and_a_full_layout_launches_as_before(triton_path, monkeypatch):
    monkeypatch.setattr(digest_graphs, "PER_LAYOUT", 2)
    out, lse = _cell()
    expected = _plain(out, lse)
    graphs = DigestGraphs(torch.device("cpu"), record=Replayed)
    PendingDigests([out, lse], BOUNDS, ROWS, graphs).names()
    flight = [PendingDigests([out, lse], BOUNDS, ROWS, graphs) for _ in range(3)]  # none read yet
    assert flight[0].graph is not flight[1].graph and None not in (flight[0].graph, flight[1].graph)
    assert flight[2].graph is None  # two in flight: the layout's limit
    first = flight[0].graph
    assert [p.names() for p in flight] == [expected] * 3
    again = PendingDigests([out, lse], BOUNDS, ROWS, graphs)
    assert again.graph is first  # read: free again


def test_tensors_at_another_address_or_cut_another_way_are_another_layout(triton_path):
    out, lse = _cell()
    graphs = DigestGraphs(torch.device("cpu"), record=Replayed)
    for _ in range(2):
        PendingDigests([out, lse], BOUNDS, ROWS, graphs).names()
    moved = PendingDigests([out.clone(), lse.clone()], BOUNDS, ROWS, graphs)
    cut = PendingDigests([out, lse], [0, 5, 12], [4, 11], graphs)
    assert moved.graph is None and cut.graph is None
    assert moved.names() == _plain(out, lse)
    assert cut.names() == split_digests([out, lse], [0, 5, 12], [4, 11])


def test_a_capture_that_fails_launches_as_before_and_is_not_tried_again(triton_path, capsys):
    tries = []

    def broken(work, stream):
        tries.append(1)
        raise RuntimeError("operation not permitted when stream is capturing")

    out, lse = _cell()
    graphs = DigestGraphs(torch.device("cpu"), record=broken)
    names = [PendingDigests([out, lse], BOUNDS, ROWS, graphs).names() for _ in range(4)]
    assert names == [_plain(out, lse)] * 4
    assert tries == [1] and "operation not permitted" in graphs.failed
    assert "digests launch as before" in capsys.readouterr().err


def test_detrun_digest_graphs_is_on_unless_set_off():
    assert TaskFlags.parse({}).digest_graphs
    for off in ("off", "0", "false"):  # YAML reads an unquoted off as false: a spec's env holds "0"
        assert not TaskFlags.parse({"DETRUN_DIGEST_GRAPHS": off}).digest_graphs
    assert TaskFlags.parse({"DETRUN_DIGEST_GRAPHS": "1"}).digest_graphs
    with pytest.raises(ValueError, match="DETRUN_DIGEST_GRAPHS='of': expected on or off"):
        TaskFlags.parse({"DETRUN_DIGEST_GRAPHS": "of"})
